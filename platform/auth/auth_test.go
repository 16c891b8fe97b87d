package auth

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

const (
	teamA  = "qk_team_a_0123456789"
	teamB  = "qk_team_b_9876543210"
	writer = "qk_writer_5555555555"
	query  = "/quarry.v1.QueryService/Query"
	upsert = "/quarry.v1.KnowledgeService/UpsertFile"
)

func policy(t *testing.T) *Policy {
	t.Helper()
	p, err := NewPolicy([]Key{
		{Name: "team-a", SHA256: HashKey(teamA), KnowledgeBases: []string{"platform"}},
		{Name: "team-b", SHA256: HashKey(teamB), KnowledgeBases: []string{"payments", "billing"}},
		{Name: "writer", SHA256: HashKey(writer), KnowledgeBases: []string{"*"}, Write: true},
	}, "/quarry.v1.KnowledgeService/")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func withKey(key string) context.Context {
	if key == "" {
		return context.Background()
	}
	return metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+key))
}

func TestAuthorize(t *testing.T) {
	p := policy(t)
	tests := []struct {
		name, key, method, kb string
		want                  error
	}{
		{"a key reads its own knowledge base", teamA, query, "platform", nil},
		{"a key may not read another team's knowledge base", teamA, query, "payments", ErrDenied},
		{"an unknown knowledge base is denied like a forbidden one", teamA, query, "nosuchkb", ErrDenied},
		{"no key is unauthenticated", "", query, "platform", ErrUnauthenticated},
		{"an unknown key is unauthenticated", "qk_nope", query, "platform", ErrUnauthenticated},
		{"a read key may not write", teamA, upsert, "platform", ErrDenied},
		{"a write key with * writes anywhere", writer, upsert, "payments", nil},
		{"a key with several knowledge bases reads each", teamB, query, "billing", nil},
		{"a call naming no knowledge base needs only a key", teamB, "/quarry.v1.SearchService/ListKnowledgeBases", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := p.Authorize(withKey(tt.key), tt.method, tt.kb)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Authorize = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestOpenPolicyOnlyOnLoopback(t *testing.T) {
	open, _ := NewPolicy(nil)
	for addr, ok := range map[string]bool{"127.0.0.1:7700": true, "[::1]:7700": true, "localhost:7700": true, "0.0.0.0:7700": false, "10.1.2.3:7700": false} {
		if err := open.CheckListen(addr); (err == nil) != ok {
			t.Errorf("open policy on %s: err %v", addr, err)
		}
	}
	if err := policy(t).CheckListen("0.0.0.0:7700"); err != nil {
		t.Errorf("a policy with keys may serve anywhere: %v", err)
	}
	if _, err := open.Authorize(context.Background(), query, "platform"); err != nil {
		t.Errorf("open policy refused a call: %v", err)
	}
}

func TestNewPolicyRejectsBadKeys(t *testing.T) {
	for name, k := range map[string]Key{
		"short hash":        {Name: "x", SHA256: "abcd", KnowledgeBases: []string{"*"}},
		"not hex":           {Name: "x", SHA256: string(make([]byte, 64)), KnowledgeBases: []string{"*"}},
		"no knowledge base": {Name: "x", SHA256: HashKey("k")},
	} {
		if _, err := NewPolicy([]Key{k}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestLoad(t *testing.T) {
	p := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(p, []byte(`[{"name":"a","sha256":"`+HashKey(teamA)+`","knowledge_bases":["platform"]}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := Load(p)
	if err != nil || len(keys) != 1 || keys[0].Name != "a" {
		t.Fatalf("Load = %v, %v", keys, err)
	}
}

// TestKnowledgeBaseOfRequests finds the field at the top level and one level down, as
// in QueryRequest and QueryStreamRequest.
func TestKnowledgeBaseOfRequests(t *testing.T) {
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name: proto.String("t.proto"), Package: proto.String("t"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("Req"), Field: []*descriptorpb.FieldDescriptorProto{
				{Name: proto.String("knowledge_base"), Number: proto.Int32(1), Type: descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(), Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()},
			}},
			{Name: proto.String("Wrap"), Field: []*descriptorpb.FieldDescriptorProto{
				{Name: proto.String("request"), Number: proto.Int32(1), Type: descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum(), TypeName: proto.String(".t.Req"), Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()},
			}},
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	req := dynamicpb.NewMessage(fd.Messages().ByName("Req"))
	req.Set(fd.Messages().ByName("Req").Fields().ByName("knowledge_base"), protoreflect.ValueOfString("platform"))
	wrap := dynamicpb.NewMessage(fd.Messages().ByName("Wrap"))
	wrap.Set(fd.Messages().ByName("Wrap").Fields().ByName("request"), protoreflect.ValueOfMessage(req))
	if got := knowledgeBase(req); got != "platform" {
		t.Errorf("top level: %q", got)
	}
	if got := knowledgeBase(wrap); got != "platform" {
		t.Errorf("one level down: %q", got)
	}
	if got := knowledgeBase("not a message"); got != "" {
		t.Errorf("not a message: %q", got)
	}
}
