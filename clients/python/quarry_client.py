#!/usr/bin/env python3
"""Ask Quarry questions over gRPC and print how each was answered.

    python3 quarry_client.py --kb platform "How do I rotate the JWT signing key?"
    python3 quarry_client.py --kb platform --explain --stream "what should I check before a deploy?"

Every question is asked in turn on one channel, so asking the same one twice shows the
exact cache answering the second time. The stubs in quarry/v1/ are generated from
proto/ by `make generate-clients` (protoc's python and pyi generators plus
grpc_python_plugin); they need the grpcio and protobuf packages (Debian:
python3-grpcio python3-protobuf; pip: grpcio protobuf).

Exit status: 0 when every question was answered, 1 when a call failed (the gRPC status is
printed on stderr as "error: CODE: message"), 2 for a usage error, 130 when interrupted
(Ctrl-C).
"""

import argparse
import ipaddress
import os
import sys
import time

# gRPC's C core logs connection failures (a TLS handshake, say) on stderr itself, in
# addition to the status the call ends with; the status says it all, on one line.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")

import grpc  # noqa: E402  (after GRPC_VERBOSITY, which the core reads when it loads)

from quarry.v1 import query_pb2, query_pb2_grpc, types_pb2

# What a caller can do about each status the QueryService documents, beyond the
# server's own message.
HINTS = {
    grpc.StatusCode.INVALID_ARGUMENT: "fix the question or the knowledge base id",
    grpc.StatusCode.NOT_FOUND: "this server does not serve that knowledge base",
    grpc.StatusCode.UNAVAILABLE: "check that Quarry runs at {addr} and that --tls matches how it serves; safe to retry with backoff",
    grpc.StatusCode.DEADLINE_EXCEEDED: "no answer within {timeout}s (--timeout)",
    grpc.StatusCode.UNAUTHENTICATED: "missing or invalid API key (--api-key or QUARRY_API_KEY)",
    grpc.StatusCode.PERMISSION_DENIED: "the API key may not query this knowledge base",
    grpc.StatusCode.RESOURCE_EXHAUSTED: "over the limit of calls in flight or per second for this caller; retry after the time the message gives",
}


# The longest --timeout: a day is more than any answer takes, and a deadline far past it
# overflowed into one already expired.
MAX_TIMEOUT_SECONDS = 86400


class IncompleteStream(Exception):
    """QueryStream ended cleanly but without the final event the API promises."""


def tier_name(tier):
    try:
        return types_pb2.Tier.Name(tier).removeprefix("TIER_")
    except ValueError:  # a tier added after these stubs were generated
        return f"tier {tier}"


def millis(duration):
    return duration.seconds * 1e3 + duration.nanos / 1e6


def print_response(resp, latency_ms, answer_streamed=False):
    origin = ""
    if resp.from_cache:
        origin = f" (cached {tier_name(resp.origin_tier)} answer)"
    print(f"tier: {tier_name(resp.tier)}{origin}  latency {latency_ms:.2f} ms "
          f"(server {millis(resp.elapsed):.2f} ms)  kb {resp.knowledge_base} generation {resp.generation}")
    if resp.degraded:
        print(f"degraded: {resp.degraded_reason}")
    if resp.sources:
        print("sources:")
        for s in resp.sources:
            print(f"  {s.relevance:.3f}  {s.path}  {s.title}")
    if not answer_streamed:
        print("answer:")
        print(resp.answer.rstrip())
    if resp.HasField("explain"):
        print_explain(resp.explain)


def print_explain(ex):
    print("explain:")
    for st in ex.stages:
        print(f"  stage {st.name:<14} {millis(st.duration):8.3f} ms  {st.outcome}")
    c = ex.cache
    print(f"  cache exact={c.exact or '-'} fuzzy={c.fuzzy or '-'} stored={c.stored}")
    if c.fuzzy_candidate:
        print(f"  fuzzy candidate {c.fuzzy_candidate!r} jaccard {c.fuzzy_similarity:.2f}: {c.fuzzy_verification}")
    if ex.HasField("gate"):
        g = ex.gate
        print(f"  gate search {g.search_text!r} scope {g.scope or '-'} results {g.result_count} "
              f"top R {g.top_relevance:.3f} second R {g.second_relevance:.3f}")
        if g.out_of_domain_rule:
            print(f"  out of domain: {g.out_of_domain_rule}")
        print(f"  direct: {g.direct_decision}")
    if ex.HasField("llm"):
        l = ex.llm
        print(f"  llm {l.model} calls {l.calls} tokens {l.prompt_tokens}+{l.completion_tokens} stop {l.stop_reason}")


class DeadlineExceeded(grpc.RpcError):
    """The call's deadline, reported by the server before this process saw it."""

    def code(self):
        return grpc.StatusCode.DEADLINE_EXCEEDED

    def details(self):
        return "Deadline Exceeded"


# How early the server's reset may arrive and still be the deadline: grpc-timeout is
# sent in whole units, rounded.
DEADLINE_SLACK_SECONDS = 0.05


def ask(stub, args, metadata, question):
    began = time.perf_counter()
    try:
        call(stub, args, metadata, question, began)
    except grpc.RpcError as err:
        # The server gives up at the same deadline and resets the stream (RST_STREAM
        # CANCEL). When that reaches this process before its own timer fires (a busy
        # machine), grpcio says CANCELLED; at the deadline, it is the deadline.
        if err.code() == grpc.StatusCode.CANCELLED and \
                time.perf_counter() - began >= args.timeout - DEADLINE_SLACK_SECONDS:
            raise DeadlineExceeded() from err
        raise


def call(stub, args, metadata, question, began):
    req = query_pb2.QueryRequest(knowledge_base=args.kb, query=question, explain=args.explain)
    if not args.stream:
        resp = stub.Query(req, timeout=args.timeout, metadata=metadata)
        print_response(resp, (time.perf_counter() - began) * 1e3)
        return
    final, streamed = None, False
    try:
        for event in stub.QueryStream(query_pb2.QueryStreamRequest(request=req), timeout=args.timeout, metadata=metadata):
            kind = event.WhichOneof("event")
            if kind == "delta":
                if not streamed:
                    print("answer (streamed):")
                    streamed = True
                print(event.delta, end="", flush=True)
            elif kind == "final":
                final = event.final
    finally:
        # End the answer's line, also when an error or Ctrl-C cut the stream short, so
        # that what follows (the error on stderr) starts a line of its own.
        if streamed:
            print(flush=True)
    if final is None:
        raise IncompleteStream("the stream ended without a final response")
    print_response(final, (time.perf_counter() - began) * 1e3, answer_streamed=streamed)


def valid_addr(addr):
    """HOST:PORT with a port gRPC will use as written (it reads "77OO" as port 77)."""
    host, _, port = addr.rpartition(":")
    return bool(host) and port.isascii() and port.isdigit() and 0 < int(port) < 65536


def loopback(addr):
    """Whether HOST:PORT names this machine, where plaintext cannot be overheard."""
    host = addr.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def main(argv=None):
    p = argparse.ArgumentParser(description="Ask Quarry questions over gRPC.")
    p.add_argument("questions", nargs="+", metavar="QUESTION", help="asked in turn on one channel")
    p.add_argument("--kb", required=True, help="knowledge base id, e.g. platform")
    p.add_argument("--addr", default=os.environ.get("QUARRY_ADDR") or "127.0.0.1:7700",
                   help="gateway host:port (default $QUARRY_ADDR or 127.0.0.1:7700)")
    p.add_argument("--explain", action="store_true", help="print the routing trace")
    p.add_argument("--stream", action="store_true", help="use QueryStream and print answer text as it arrives")
    p.add_argument("--api-key", default=os.environ.get("QUARRY_API_KEY", ""),
                   help="sent as 'authorization: Bearer KEY' (default $QUARRY_API_KEY)")
    p.add_argument("--tls", action="store_true",
                   help="connect with TLS, trusting grpcio's bundled public CAs, not the system's store "
                        "(a private CA: GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=ca.pem, which replaces them)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per question, at most 86400 (default 10)")
    args = p.parse_args(argv)
    # Also a bound: gRPC turned "inf" or 1e300 seconds into a deadline already past.
    if not 0 < args.timeout <= MAX_TIMEOUT_SECONDS:
        p.error(f"--timeout must be a positive number of seconds, at most {MAX_TIMEOUT_SECONDS} (a day)")
    if not valid_addr(args.addr):
        p.error(f"--addr {args.addr!r} is not HOST:PORT")
    # A key read from a file may end in a line break. Anything else outside printable
    # ASCII gRPC refuses to send, and its error quotes the metadata: the key itself.
    args.api_key = args.api_key.strip(" \t\r\n")
    if not all("!" <= ch <= "~" for ch in args.api_key):
        p.error("the API key (--api-key or QUARRY_API_KEY) has characters a bearer token cannot have "
                "(white space, control or non-ASCII); the key is not shown")

    if args.api_key and not args.tls and not loopback(args.addr):
        p.error("the API key goes only over --tls or to a loopback address: "
                "in plaintext anyone on the path could read it")

    metadata = [("authorization", f"Bearer {args.api_key}")] if args.api_key else []
    channel = (grpc.secure_channel(args.addr, grpc.ssl_channel_credentials()) if args.tls
               else grpc.insecure_channel(args.addr))
    with channel:
        stub = query_pb2_grpc.QueryServiceStub(channel)
        for i, question in enumerate(args.questions):
            if i:
                print()
            print(f"> {question}")
            try:
                ask(stub, args, metadata, question)
            except grpc.RpcError as err:
                code = err.code()
                hint = HINTS.get(code, "").format(addr=args.addr, timeout=f"{args.timeout:g}")
                print(f"error: {code.name}: {err.details()}" + (f" ({hint})" if hint else ""), file=sys.stderr)
                return 1
            except IncompleteStream as err:
                print(f"error: {err}", file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("error: CANCELLED: interrupted", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:
        # The reader went away (| head -1): stop quietly, as command-line tools do. Not
        # SIGPIPE's default action, which would also end the process when a gRPC socket
        # breaks (Python's signal docs); stdout goes to /dev/null so the interpreter's
        # own flush at exit does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
