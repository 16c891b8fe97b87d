package main

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/quarry-router/quarry/platform/auth"
	"github.com/quarry-router/quarry/services/search/kb"
)

// keyPrefix marks Quarry API keys, so that a leaked one is recognisable (secret
// scanners, logs) and never mistaken for another system's token.
const keyPrefix = "qk_"

// keyCmd generates an API key and the entry of the -auth-keys file that grants it. The
// key is 256 random bits, so guessing one is hopeless and the services need no
// throttling of failed attempts to protect it; only its SHA-256 goes in the file.
func keyCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("key", flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("name", "", "who or what the key is for, as logs will name it (required)")
	kbs := fs.String("kb", "", `knowledge bases the key may use, comma separated, or "*" for all (required)`)
	write := fs.Bool("write", false, "allow the write side (sync, archive) as well as queries")
	asJSON := fs.Bool("json", false, `print {"key": ..., "entry": ...} as JSON`)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: quarry key -name NAME -kb KB[,KB...] [-write] [-json]")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	entry := auth.Key{Name: strings.TrimSpace(*name), Write: *write}
	for _, kb := range strings.Split(*kbs, ",") {
		if kb = strings.TrimSpace(kb); kb != "" {
			entry.KnowledgeBases = append(entry.KnowledgeBases, kb)
		}
	}
	switch {
	case entry.Name == "":
		return usagef("-name is required: logs and limits name the key by it")
	case len(entry.KnowledgeBases) == 0:
		return usagef(`-kb is required: the knowledge bases the key may use, or "*" for all`)
	}
	// A name no knowledge base can have ("Bad KB", a pasted path) granted nothing,
	// without a word from the key command or from the services that load the entry.
	for _, id := range entry.KnowledgeBases {
		if id != "*" && !kb.ValidID(id) {
			return usagef("-kb %q is no knowledge base id (%s), nor \"*\"", id, kb.IDRule)
		}
	}
	key, err := newKey()
	if err != nil {
		return err
	}
	entry.SHA256 = auth.HashKey(key)
	// The entry must load as the services will load it.
	if _, err := auth.NewPolicy([]auth.Key{entry}); err != nil {
		return err
	}
	line, err := json.Marshal(entry)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Key   string   `json:"key"`
			Entry auth.Key `json:"entry"`
		}{key, entry})
	}
	fmt.Fprintf(stdout, "API key for %q (shown once: give it to the caller; it is not stored anywhere):\n\n  %s\n\n", entry.Name, key)
	fmt.Fprintf(stdout, "Entry for the -auth-keys file (a JSON list), which holds only the key's SHA-256:\n\n  %s\n", line)
	return nil
}

// newKey returns keyPrefix and 256 random bits, base64url without padding.
func newKey() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random key: %w", err)
	}
	return keyPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}
