// Ask Quarry questions over gRPC and print how each was answered.
//
//   npm ci && npm run build
//   node dist/quarry_client.js --kb platform "How do I rotate the JWT signing key?"
//   node dist/quarry_client.js --kb platform --explain --stream "what should I check before a deploy?"
//
// Every question is asked in turn on one HTTP/2 connection, so asking the same one twice
// shows the exact cache answering the second time. The stubs in src/gen are generated from
// proto/ by `make generate-clients` (protoc-gen-es); Connect-ES speaks the gRPC protocol
// through @connectrpc/connect-node's gRPC transport.
//
// Exit status: 0 when every question was answered, 1 when a call failed (the gRPC status
// is printed on stderr as "error: CODE: message"), 2 for a usage error, 130 when
// interrupted (Ctrl-C).

import { parseArgs } from "node:util";
import type { Duration } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { QueryService, type QueryResponse } from "./gen/quarry/v1/query_pb.js";
import { Tier, type Explain } from "./gen/quarry/v1/types_pb.js";

const usage = `usage: quarry_client --kb KB [--addr HOST:PORT] [--explain] [--stream] [--api-key KEY] [--tls] [--timeout SECONDS] QUESTION...

  --kb        knowledge base id, e.g. platform (required)
  --addr      gateway address (default $QUARRY_ADDR or 127.0.0.1:7700)
  --explain   print the routing trace
  --stream    use QueryStream and print answer text as it arrives
  --api-key   sent as "authorization: Bearer KEY" (default $QUARRY_API_KEY)
  --tls       connect with TLS, trusting Node's bundled public CAs, not the system's store
              (a private CA: NODE_EXTRA_CA_CERTS=ca.pem)
  --timeout   seconds per question, at most 86400 (default 10)`;

// What a caller can do about each status the QueryService documents, beyond the
// server's own message.
const hints: Partial<Record<Code, string>> = {
  [Code.InvalidArgument]: "fix the question or the knowledge base id",
  [Code.NotFound]: "this server does not serve that knowledge base",
  [Code.Unavailable]: "check that Quarry runs at {addr} and that --tls matches how it serves; safe to retry with backoff",
  [Code.DeadlineExceeded]: "no answer within {timeout}s (--timeout)",
  [Code.Unauthenticated]: "missing or invalid API key (--api-key or QUARRY_API_KEY)",
  [Code.PermissionDenied]: "the API key may not query this knowledge base",
  [Code.ResourceExhausted]: "over the limit of calls in flight or per second for this caller; retry after the time the message gives",
};

// The longest --timeout: a day is more than any answer takes.
const maxTimeoutSeconds = 86400;

interface Options {
  kb: string;
  addr: string;
  explain: boolean;
  stream: boolean;
  apiKey: string;
  tls: boolean;
  timeoutSeconds: number;
  questions: string[];
}

function parse(argv: string[]): Options {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      kb: { type: "string" },
      addr: { type: "string", default: process.env.QUARRY_ADDR || "127.0.0.1:7700" },
      explain: { type: "boolean", default: false },
      stream: { type: "boolean", default: false },
      "api-key": { type: "string", default: process.env.QUARRY_API_KEY ?? "" },
      tls: { type: "boolean", default: false },
      timeout: { type: "string", default: "10" },
      help: { type: "boolean", short: "h", default: false },
    },
  });
  if (values.help) {
    console.log(usage);
    process.exit(0);
  }
  const timeoutSeconds = Number(values.timeout);
  if (!values.kb || positionals.length === 0) {
    throw new Error("--kb and at least one QUESTION are required");
  }
  // Also a bound: Node's timers hold at most 2^31-1 ms (24.8 days) and fire a longer
  // one (or "Infinity") after 1 ms, a DEADLINE_EXCEEDED before any answer.
  if (!(timeoutSeconds > 0 && timeoutSeconds <= maxTimeoutSeconds)) {
    throw new Error(`--timeout must be a positive number of seconds, at most ${maxTimeoutSeconds} (a day)`);
  }
  if (!validAddr(values.addr!)) throw new Error(`--addr "${values.addr}" is not HOST:PORT`);
  // A key read from a file may end in a line break. Anything else outside printable
  // ASCII cannot be sent as a header, and the error would quote the header: the key.
  const apiKey = values["api-key"]!.replace(/^[ \t\r\n]+|[ \t\r\n]+$/g, "");
  if (!/^[\x21-\x7e]*$/.test(apiKey)) {
    throw new Error(
      "the API key (--api-key or QUARRY_API_KEY) has characters a bearer token cannot have " +
        "(white space, control or non-ASCII); the key is not shown",
    );
  }
  if (apiKey && !values.tls && !loopback(values.addr!)) {
    throw new Error(
      "the API key goes only over --tls or to a loopback address: in plaintext anyone on the path could read it",
    );
  }
  return {
    kb: values.kb,
    addr: values.addr!,
    explain: values.explain!,
    stream: values.stream!,
    apiKey,
    tls: values.tls!,
    timeoutSeconds,
    questions: positionals,
  };
}

// loopback reports whether HOST:PORT names this machine, where plaintext cannot be
// overheard.
function loopback(addr: string): boolean {
  const host = new URL(`http://${addr}`).hostname.replace(/^\[|\]$/g, "");
  return host === "localhost" || host === "::1" || /^127\.\d+\.\d+\.\d+$/.test(host);
}

// HOST:PORT, as the URL the transport is given will take it (a typo such as "77OO"
// made it throw).
function validAddr(addr: string): boolean {
  const i = addr.lastIndexOf(":");
  const port = addr.slice(i + 1);
  if (i <= 0 || !/^[0-9]{1,5}$/.test(port) || Number(port) < 1 || Number(port) > 65535) return false;
  try {
    return new URL(`http://${addr}`).hostname !== "";
  } catch {
    return false;
  }
}

// The gRPC status name as every other gRPC library prints it: Code.InvalidArgument →
// INVALID_ARGUMENT, and Connect's Code.Canceled → CANCELLED (gRPC's spelling).
function codeName(code: Code): string {
  if (code === Code.Canceled) return "CANCELLED";
  return Code[code].replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
}

// Connect reports a failed TLS handshake (an untrusted or mismatched certificate, a
// plaintext server) as INTERNAL, which QueryService reserves for faults of the gateway;
// gRPC's other libraries, and the gRPC spec for a connection that could not be made,
// say UNAVAILABLE. Node's TLS errors carry an OpenSSL or certificate code.
function isTLSFailure(err: ConnectError): boolean {
  const code = (err.cause as { code?: unknown } | undefined)?.code;
  return (
    err.code === Code.Internal &&
    typeof code === "string" &&
    /^(ERR_SSL_|ERR_TLS_)|CERT|_SIGNATURE$|^UNABLE_TO_|_KEY_USAGE$/.test(code)
  );
}

// The tier's name; stubs older than the server may not know it.
function tierName(tier: Tier): string {
  return Tier[tier] ?? `tier ${tier}`;
}

function millis(d: Duration | undefined): number {
  return d ? Number(d.seconds) * 1e3 + d.nanos / 1e6 : 0;
}

function printResponse(resp: QueryResponse, latencyMs: number, answerStreamed: boolean): void {
  const origin = resp.fromCache ? ` (cached ${tierName(resp.originTier)} answer)` : "";
  console.log(
    `tier: ${tierName(resp.tier)}${origin}  latency ${latencyMs.toFixed(2)} ms ` +
      `(server ${millis(resp.elapsed).toFixed(2)} ms)  kb ${resp.knowledgeBase} generation ${resp.generation}`,
  );
  if (resp.degraded) console.log(`degraded: ${resp.degradedReason}`);
  if (resp.sources.length > 0) {
    console.log("sources:");
    for (const s of resp.sources) console.log(`  ${s.relevance.toFixed(3)}  ${s.path}  ${s.title}`);
  }
  if (!answerStreamed) {
    console.log("answer:");
    console.log(resp.answer.trimEnd());
  }
  if (resp.explain) printExplain(resp.explain);
}

function printExplain(ex: Explain): void {
  console.log("explain:");
  for (const st of ex.stages) {
    console.log(`  stage ${st.name.padEnd(14)} ${millis(st.duration).toFixed(3).padStart(8)} ms  ${st.outcome}`);
  }
  const c = ex.cache;
  if (c) {
    console.log(`  cache exact=${c.exact || "-"} fuzzy=${c.fuzzy || "-"} stored=${c.stored}`);
    if (c.fuzzyCandidate) {
      console.log(`  fuzzy candidate "${c.fuzzyCandidate}" jaccard ${c.fuzzySimilarity.toFixed(2)}: ${c.fuzzyVerification}`);
    }
  }
  const g = ex.gate;
  if (g) {
    console.log(
      `  gate search "${g.searchText}" scope ${g.scope || "-"} results ${g.resultCount} ` +
        `top R ${g.topRelevance.toFixed(3)} second R ${g.secondRelevance.toFixed(3)}`,
    );
    if (g.outOfDomainRule) console.log(`  out of domain: ${g.outOfDomainRule}`);
    console.log(`  direct: ${g.directDecision}`);
  }
  const l = ex.llm;
  if (l) {
    console.log(`  llm ${l.model} calls ${l.calls} tokens ${l.promptTokens}+${l.completionTokens} stop ${l.stopReason}`);
  }
}

// QueryStream ended cleanly but without the final event the API promises.
class IncompleteStream extends Error {}

// True while streamed answer text is on stdout without its line ended: an error or a
// Ctrl-C ends the line first, so that what follows starts a line of its own.
let answerLineOpen = false;

function endAnswerLine(): void {
  if (answerLineOpen) process.stdout.write("\n");
  answerLineOpen = false;
}

// How early the server's reset may arrive and still be the deadline: grpc-timeout is
// sent in whole units, rounded.
const deadlineSlackMs = 50;

async function ask(client: Client<typeof QueryService>, opts: Options, question: string): Promise<void> {
  const began = performance.now();
  try {
    await call(client, opts, question, began);
  } catch (err) {
    // The server gives up at the same deadline and resets the stream (RST_STREAM
    // CANCEL). When that arrives before this process's own timer fires (a busy
    // machine), it reads as CANCELLED; at the deadline, it is the deadline.
    if (
      err instanceof ConnectError &&
      err.code === Code.Canceled &&
      performance.now() - began >= opts.timeoutSeconds * 1000 - deadlineSlackMs
    ) {
      throw new ConnectError("the operation timed out", Code.DeadlineExceeded, undefined, undefined, err);
    }
    throw err;
  }
}

async function call(client: Client<typeof QueryService>, opts: Options, question: string, began: number): Promise<void> {
  const request = { knowledgeBase: opts.kb, query: question, explain: opts.explain };
  const callOptions = { timeoutMs: opts.timeoutSeconds * 1000 };
  if (!opts.stream) {
    const resp = await client.query(request, callOptions);
    printResponse(resp, performance.now() - began, false);
    return;
  }
  let final: QueryResponse | undefined;
  let streamed = false;
  for await (const ev of client.queryStream({ request }, callOptions)) {
    switch (ev.event.case) {
      case "delta":
        if (!streamed) console.log("answer (streamed):");
        streamed = answerLineOpen = true;
        process.stdout.write(ev.event.value);
        break;
      case "final":
        final = ev.event.value;
        break;
    }
  }
  endAnswerLine();
  if (!final) throw new IncompleteStream("the stream ended without a final response");
  printResponse(final, performance.now() - began, streamed);
}

async function main(): Promise<number> {
  let opts: Options;
  try {
    opts = parse(process.argv.slice(2));
  } catch (err) {
    console.error(`${(err as Error).message}\n\n${usage}`);
    return 2;
  }
  const baseUrl = `${opts.tls ? "https" : "http"}://${opts.addr}`;
  // Our own session manager, so the connection can be closed once the questions are done.
  const sessionManager = new Http2SessionManager(baseUrl);
  const interceptors: Interceptor[] = [];
  if (opts.apiKey) {
    interceptors.push((next) => async (req) => {
      req.header.set("authorization", `Bearer ${opts.apiKey}`);
      return next(req);
    });
  }
  const client = createClient(QueryService, createGrpcTransport({ baseUrl, sessionManager, interceptors }));
  // Ctrl-C: say so on one line, as the failed call it is, rather than vanish mid-line.
  process.once("SIGINT", () => {
    endAnswerLine();
    console.error("error: CANCELLED: interrupted");
    process.exit(130);
  });
  try {
    for (const [i, question] of opts.questions.entries()) {
      if (i > 0) console.log();
      console.log(`> ${question}`);
      await ask(client, opts, question);
    }
    return 0;
  } catch (err) {
    endAnswerLine();
    if (err instanceof IncompleteStream) {
      console.error(`error: ${err.message}`);
      return 1;
    }
    if (!(err instanceof ConnectError)) throw err;
    const code = isTLSFailure(err) ? Code.Unavailable : err.code;
    const hint = (hints[code] ?? "").replace("{addr}", opts.addr).replace("{timeout}", String(opts.timeoutSeconds));
    // One line: OpenSSL's messages end in a newline.
    let message = err.rawMessage.trim().replace(/\s*\n\s*/g, " ");
    if (code !== err.code) message = `TLS handshake failed: ${message}`;
    console.error(`error: ${codeName(code)}: ${message}${hint ? ` (${hint})` : ""}`);
    return 1;
  } finally {
    sessionManager.abort();
  }
}

process.exitCode = await main();
