package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
)

func query(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("query", flag.ContinueOnError)
	var srv serverFlags
	// The example clients' variable too: one setting for every way of asking.
	addr := "127.0.0.1:7700"
	if v := os.Getenv("QUARRY_ADDR"); v != "" {
		addr = v
	}
	srv.register(fs, addr, "gateway address (the default is $QUARRY_ADDR when set)")
	kbID := fs.String("kb", "platform", "knowledge base to ask")
	explain := fs.Bool("explain", false, "print the routing trace")
	stream := fs.Bool("stream", false, "use QueryStream and print LLM text as it arrives")
	timeout := fs.Duration("timeout", 60*time.Second, "deadline for the answer")
	// Flags may follow the question: `quarry query "how do I X?" -explain` asked
	// "how do I X? -explain" of the default knowledge base, without the trace.
	if err := parseFlags(fs, reorderArgs(fs, args), true); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usagef(`a question is required: quarry query [-kb K] "question"`)
	}
	question := strings.Join(fs.Args(), " ")
	if strings.TrimSpace(question) == "" {
		return usagef(`the question is empty: quarry query [-kb K] "question"`)
	}
	if err := checkCallFlags(*timeout, *kbID); err != nil {
		return err
	}
	if !utf8.ValidString(question) {
		// gRPC cannot send it: "Internal: grpc: error while marshaling: string field
		// contains invalid UTF-8", as if the gateway had failed.
		return usagef("the question is not valid UTF-8 (is the terminal set to another encoding?)")
	}
	conn, err := srv.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	req := &quarryv1.QueryRequest{KnowledgeBase: *kbID, Query: question, Explain: *explain}
	c := quarryv1.NewQueryServiceClient(conn)
	start := time.Now()
	var resp *quarryv1.QueryResponse
	streamed := ""
	if *stream {
		resp, streamed, err = streamQuery(ctx, c, req, stdout)
	} else {
		resp, err = c.Query(ctx, req)
	}
	if err != nil {
		if streamed != "" {
			fmt.Fprintln(stdout) // end the partial answer's line before the error
		}
		return statusError(err)
	}
	if streamed != "" {
		// The deltas are the answer (they concatenate to it), already on the screen:
		// end its line and print the rest without printing the answer a second time.
		if !strings.HasSuffix(streamed, "\n") {
			fmt.Fprintln(stdout)
		}
		fmt.Fprintln(stdout)
	}
	printResponse(stdout, resp, time.Since(start), streamed == "" || streamed != resp.GetAnswer())
	return nil
}

// checkCallFlags refuses a -timeout that leaves no time for the call (it failed as
// DEADLINE_EXCEEDED after dialing) and a -kb that gRPC cannot send.
func checkCallFlags(timeout time.Duration, kb string) error {
	if timeout <= 0 {
		return usagef("-timeout %v: the deadline must be positive", timeout)
	}
	if !utf8.ValidString(kb) {
		return usagef("-kb %q is not valid UTF-8", kb)
	}
	return nil
}

// streamQuery prints the answer's text as it arrives and returns the final response
// and the text it printed.
func streamQuery(ctx context.Context, c quarryv1.QueryServiceClient, req *quarryv1.QueryRequest, w io.Writer) (*quarryv1.QueryResponse, string, error) {
	s, err := c.QueryStream(ctx, &quarryv1.QueryStreamRequest{Request: req})
	if err != nil {
		return nil, "", err
	}
	var printed strings.Builder
	for {
		ev, err := s.Recv()
		if err == io.EOF {
			return nil, printed.String(), errors.New("the stream ended without a final response")
		}
		if err != nil {
			return nil, printed.String(), err
		}
		switch e := ev.Event.(type) {
		case *quarryv1.QueryStreamResponse_Delta:
			fmt.Fprint(w, e.Delta)
			printed.WriteString(e.Delta)
		case *quarryv1.QueryStreamResponse_Final:
			return e.Final, printed.String(), nil
		}
	}
}

// tierName drops the enum prefix: TIER_DIRECT → DIRECT.
func tierName(t quarryv1.Tier) string { return strings.TrimPrefix(t.String(), "TIER_") }

// summaryLine is the one-line account of a response that "up" prints per question.
func summaryLine(resp *quarryv1.QueryResponse, rtt time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-14s %7.2f ms", tierName(resp.GetTier()), float64(rtt.Microseconds())/1000)
	if resp.GetFromCache() {
		fmt.Fprintf(&b, "  (cached %s answer)", tierName(resp.GetOriginTier()))
	}
	if resp.GetDegraded() {
		fmt.Fprintf(&b, "  (degraded: %s)", resp.GetDegradedReason())
	}
	return b.String()
}

// printResponse prints a response; withAnswer false leaves out the answer's text (a
// streamed answer is already printed).
func printResponse(w io.Writer, resp *quarryv1.QueryResponse, rtt time.Duration, withAnswer bool) {
	fmt.Fprintf(w, "tier:    %s\n", summaryLine(resp, rtt))
	fmt.Fprintf(w, "kb:      %s (generation %d), server time %.2f ms\n", resp.GetKnowledgeBase(), resp.GetGeneration(),
		float64(resp.GetElapsed().AsDuration().Microseconds())/1000)
	if resp.GetDegraded() {
		fmt.Fprintf(w, "note:    %s\n", resp.GetDegradedReason())
	}
	if len(resp.GetSources()) > 0 {
		fmt.Fprintln(w, "sources:")
		for _, s := range resp.GetSources() {
			flag := ""
			if s.GetArchived() {
				flag = " [archived]"
			}
			// R is the calibrated relevance the gates decide on, score the compound
			// ranking score that orders the sources (README, "Calibration").
			fmt.Fprintf(w, "  R=%.3f score=%.3f  %s  %s%s\n", s.GetRelevance(), s.GetScore(), s.GetPath(), s.GetTitle(), flag)
		}
	}
	if withAnswer {
		fmt.Fprintf(w, "answer:\n%s\n", strings.TrimSpace(resp.GetAnswer()))
	}
	if ex := resp.GetExplain(); ex != nil {
		printExplain(w, ex)
	}
}

func printExplain(w io.Writer, ex *quarryv1.Explain) {
	fmt.Fprintln(w, "\nexplain:")
	for _, s := range ex.GetStages() {
		fmt.Fprintf(w, "  %-14s %8.3f ms  %s\n", s.GetName(), float64(s.GetDuration().AsDuration().Nanoseconds())/1e6, s.GetOutcome())
	}
	if c := ex.GetCache(); c != nil {
		fmt.Fprintf(w, "  cache: key=%q tokens=%v exact=%s fuzzy=%s", c.GetNormalisedQuery(), c.GetTokens(), c.GetExact(), c.GetFuzzy())
		if c.GetFuzzyCandidate() != "" {
			fmt.Fprintf(w, " candidate=%q similarity=%.2f verification=%q", c.GetFuzzyCandidate(), c.GetFuzzySimilarity(), c.GetFuzzyVerification())
		}
		fmt.Fprintln(w)
	}
	if g := ex.GetGate(); g != nil {
		fmt.Fprintf(w, "  gate: search=%q scope=%q all_terms=%v entity=%v", g.GetSearchText(), g.GetScope(), g.GetAllTermsMatched(), g.GetEntityTerms())
		if rule := g.GetOutOfDomainRule(); rule != "" && g.GetDirectDecision() == "" {
			// The out-of-domain check decided first: the relevance gate has no numbers.
			fmt.Fprintf(w, " ood_rule=%q (the relevance gate did not run)\n", rule)
		} else {
			fmt.Fprintf(w, " ood_rule=%q top_R=%.3f second_R=%.3f decision=%q\n", rule, g.GetTopRelevance(), g.GetSecondRelevance(), g.GetDirectDecision())
		}
		for _, r := range g.GetResults() {
			fmt.Fprintf(w, "    %-48s bm25=%.2f cov=%.2f R=%.3f imp=%.0f rec=%.2f boost=%.2f score=%.3f %s\n",
				r.GetPath(), r.GetEngineScore(), r.GetCoverage(), r.GetRelevance(), r.GetImportance(), r.GetRecency(), r.GetBoost(), r.GetScore(), r.GetPropagatedFrom())
		}
	}
	if l := ex.GetLlm(); l != nil {
		fmt.Fprintf(w, "  llm: model=%s calls=%d iterations=%d tokens=%d+%d stop=%s", l.GetModel(), l.GetCalls(), l.GetIterations(), l.GetPromptTokens(), l.GetCompletionTokens(), l.GetStopReason())
		if n := l.GetContextTrims(); n > 0 {
			fmt.Fprintf(w, " context_trims=%d", n) // the chat outgrew the model's window
		}
		fmt.Fprintln(w)
		for _, c := range l.GetToolCalls() {
			fmt.Fprintf(w, "    tool %s\n", c)
		}
	}
}
