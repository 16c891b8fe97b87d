package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/quarry-router/quarry/platform/auth"
	"google.golang.org/grpc/metadata"
)

// A generated key is 256 random bits that the entry printed beside it grants, through
// the same policy the services load, and to nothing else.
func TestKeyGeneratesAKeyItsEntryGrants(t *testing.T) {
	gen := func(args ...string) (key string, entry auth.Key) {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := run(context.Background(), append([]string{"key", "-json"}, args...), &out, &errOut); code != 0 {
			t.Fatalf("quarry key %v: exit %d: %s", args, code, errOut.String())
		}
		var got struct {
			Key   string   `json:"key"`
			Entry auth.Key `json:"entry"`
		}
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatalf("%v: %s", err, out.String())
		}
		return got.Key, got.Entry
	}
	key, entry := gen("-name", "ci", "-kb", "platform, gostd")
	if !strings.HasPrefix(key, keyPrefix) || len(key) != len(keyPrefix)+43 {
		t.Fatalf("key %q: want %s and 43 base64url characters (256 bits)", key, keyPrefix)
	}
	if entry.Name != "ci" || entry.Write || strings.Join(entry.KnowledgeBases, ",") != "platform,gostd" {
		t.Fatalf("entry %+v", entry)
	}
	if entry.SHA256 != auth.HashKey(key) {
		t.Fatalf("entry sha256 %s is not the key's %s", entry.SHA256, auth.HashKey(key))
	}
	other, _ := gen("-name", "ci", "-kb", "platform")
	if other == key {
		t.Fatal("two runs gave the same key")
	}

	p, err := auth.NewPolicy([]auth.Key{entry})
	if err != nil {
		t.Fatal(err)
	}
	call := func(bearer, kb string) error {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+bearer))
		_, err := p.Authorize(ctx, "/quarry.v1.QueryService/Query", kb)
		return err
	}
	if err := call(key, "platform"); err != nil {
		t.Errorf("the key on its knowledge base: %v", err)
	}
	if err := call(key, "payroll"); err == nil {
		t.Error("the key was allowed a knowledge base its entry does not name")
	}
	if err := call(other, "platform"); err == nil {
		t.Error("another key was allowed by this entry")
	}
	if _, w := gen("-name", "sync-bot", "-kb", "*", "-write"); !w.Write || w.KnowledgeBases[0] != "*" {
		t.Errorf("-write -kb '*' gave %+v", w)
	}
}

func TestKeyRejectsAnIncompleteGrant(t *testing.T) {
	for _, args := range [][]string{
		{"-kb", "platform"},
		{"-name", "ci"},
		{"-name", "ci", "-kb", " , "},
		{"-name", "ci", "-kb", "platform", "extra"},
	} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), append([]string{"key"}, args...), &out, &errOut); code == 0 || out.Len() > 0 {
			t.Errorf("quarry key %q: exit %d, printed %q; want a failure and no key", args, code, out.String())
		}
	}
}
