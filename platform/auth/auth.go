// Package auth checks Quarry's callers: API keys sent as "authorization: Bearer <key>",
// each allowed a set of knowledge bases with read or write rights. Keys are kept and
// compared only as SHA-256 hashes, in constant time.
package auth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/quarry-router/quarry/platform/limit"
	"github.com/quarry-router/quarry/platform/reload"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Right is what a key may do with a knowledge base.
type Right int

// Rights, weakest first; Write implies Read.
const (
	Read Right = iota + 1
	Write
)

// Key is one API key's grant, as configured.
type Key struct {
	// Name identifies the key in logs (never the key itself).
	Name string `json:"name"`
	// SHA256 is the hex SHA-256 of the key.
	SHA256 string `json:"sha256"`
	// KnowledgeBases the key may use; "*" means all.
	KnowledgeBases []string `json:"knowledge_bases"`
	// Write allows the write side (KnowledgeService) as well as queries.
	Write bool `json:"write"`
	// Limits override the service's per-caller limits for this key: a zero field keeps
	// the default (-limit-*), a negative one lifts the limit.
	Limits limit.Limits `json:"limits,omitzero"`
}

// Policy decides who may do what. The zero Policy (no keys) is open.
type Policy struct {
	// keys are NewPolicy's; file's when the keys come from a file.
	keys []parsedKey
	// file holds the keys of the -auth-keys file, read again when it changes (keys are
	// added and revoked by changing the file: a Kubernetes Secret's volume is updated in
	// place within a minute or so), without a restart.
	file *reload.Value[[]parsedKey]
	// writeMethods are the full gRPC method names that need the Write right.
	writeMethods map[string]bool

	log *slog.Logger
	// refused counts the calls Tap refused; refusedLogged is how many of them have been
	// logged, and loggedAt when (Unix nanoseconds).
	refused, refusedLogged, loggedAt atomic.Int64
}

// reloadEvery is how often calls may look at the keys file for a change: a stat, at most
// once a second per process, not one per call.
var reloadEvery = time.Second

type parsedKey struct {
	Key
	hash []byte
}

// HashKey returns the hex SHA-256 of an API key, the form keys are configured in.
func HashKey(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

// Load reads a JSON list of Keys from path. A field it does not know is an error: a
// misspelt one ("writes", "concurency") would otherwise be dropped without a word and
// the key run with other rights or limits than its entry says.
func Load(path string) ([]Key, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth keys: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var keys []Key
	if err := dec.Decode(&keys); err != nil {
		return nil, fmt.Errorf("auth keys %s: %w", path, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("auth keys %s: more after the list of keys", path)
	}
	return keys, nil
}

// LoadPolicy is NewPolicy over the keys in the JSON file at path, the -auth-keys flag of
// every service; an empty path gives the open policy. The file is read again when it
// changes (looked at once a second at most, as calls arrive): a file changed into one
// that cannot be used (no keys, bad JSON, a bad entry) keeps the keys read before, and
// says so on log (nil for slog's default).
func LoadPolicy(path string, log *slog.Logger, writeMethods ...string) (*Policy, error) {
	if path == "" {
		return NewPolicy(nil, writeMethods...)
	}
	if log == nil {
		log = slog.Default()
	}
	file, err := reload.New(func() ([]parsedKey, error) { return loadKeys(path) }, path)
	if err != nil {
		return nil, err
	}
	file.Every = reloadEvery
	file.OnChange = func(err error) {
		if err != nil {
			log.Error("the changed API keys file cannot be used; the keys read before stay", "err", err)
			return
		}
		log.Info("API keys file read again", "path", path)
	}
	p := newPolicy(writeMethods)
	p.file = file
	p.log = log
	return p, nil
}

// loadKeys reads and checks the keys in the file at path.
func loadKeys(path string) ([]parsedKey, error) {
	keys, err := Load(path)
	if err != nil {
		return nil, fmt.Errorf("-auth-keys: %w", err)
	}
	if len(keys) == 0 {
		// No keys means open: a file emptied by mistake must not open the service.
		return nil, fmt.Errorf("-auth-keys %s: no keys in it (leave the flag out to run without keys)", path)
	}
	parsed, err := parseKeys(keys)
	if err != nil {
		return nil, fmt.Errorf("-auth-keys: %w", err)
	}
	return parsed, nil
}

// NewPolicy checks keys and returns the policy. writeMethods name the RPCs (full method
// names, "/pkg.Service/Method", or "/pkg.Service/" for a whole service) that need Write.
func NewPolicy(keys []Key, writeMethods ...string) (*Policy, error) {
	parsed, err := parseKeys(keys)
	if err != nil {
		return nil, err
	}
	p := newPolicy(writeMethods)
	p.keys = parsed
	return p, nil
}

func newPolicy(writeMethods []string) *Policy {
	p := &Policy{writeMethods: map[string]bool{}}
	for _, m := range writeMethods {
		p.writeMethods[m] = true
	}
	return p
}

func parseKeys(keys []Key) ([]parsedKey, error) {
	out := make([]parsedKey, 0, len(keys))
	for i, k := range keys {
		h, err := hex.DecodeString(k.SHA256)
		if err != nil || len(h) != sha256.Size {
			return nil, fmt.Errorf("auth key %d (%q): sha256 must be 64 hex characters", i, k.Name)
		}
		if len(k.KnowledgeBases) == 0 {
			return nil, fmt.Errorf("auth key %d (%q): no knowledge_bases (use [\"*\"] for all)", i, k.Name)
		}
		out = append(out, parsedKey{Key: k, hash: h})
	}
	return out, nil
}

// current returns the keys, first reading the keys file again if it changed and it is
// time to look.
func (p *Policy) current() []parsedKey {
	if p.file != nil {
		return p.file.Get()
	}
	return p.keys
}

// held returns the keys as last read, without looking at the keys file (see Tap).
func (p *Policy) held() []parsedKey {
	if p.file != nil {
		return p.file.Peek()
	}
	return p.keys
}

// Open reports whether the policy lets anyone in (no keys configured).
func (p *Policy) Open() bool { return p.file == nil && len(p.current()) == 0 }

// CheckListen refuses an open policy on anything but a loopback address: an embedded
// Quarry may run without keys on a laptop, never on a network.
func (p *Policy) CheckListen(addr string) error {
	if !p.Open() {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		return nil
	}
	return fmt.Errorf("no API keys configured (-auth-keys): refusing to serve openly on %s; listen on loopback or configure keys", addr)
}

// Errors of Authorize; the interceptors turn them into UNAUTHENTICATED and
// PERMISSION_DENIED.
var (
	ErrUnauthenticated = errors.New("missing or unknown API key")
	ErrDenied          = errors.New("not allowed")
)

// Authorize checks that the bearer key in ctx may call method on knowledge base kb.
func (p *Policy) Authorize(ctx context.Context, method, kb string) (name string, err error) {
	k, err := p.authorize(ctx, method, kb)
	if k != nil {
		name = k.Name
	}
	return name, err
}

func (p *Policy) authorize(ctx context.Context, method, kb string) (*parsedKey, error) {
	keys := p.current()
	if p.file == nil && len(keys) == 0 {
		return nil, nil // open
	}
	md, _ := metadata.FromIncomingContext(ctx)
	match := lookup(keys, md)
	if match == nil {
		return nil, ErrUnauthenticated
	}
	if p.needsWrite(method) && !match.Write {
		return match, ErrDenied
	}
	// An empty kb (e.g. listing knowledge bases) needs a key, nothing more.
	if kb != "" && !(Caller{KnowledgeBases: match.KnowledgeBases}).May(kb) {
		return match, ErrDenied
	}
	return match, nil
}

// Caller is the key a call was authorized with, as the interceptors record it in the
// call's context for what runs after them (per-key limits).
type Caller struct {
	// Name is the key's name, for logs and messages.
	Name string
	// ID tells keys apart even when two share a name: the key's hash.
	ID string
	// Limits are the key's overrides of the service's limits.
	Limits limit.Limits
	// KnowledgeBases the key may use ("*": all).
	KnowledgeBases []string
}

// May reports whether the caller's key may use knowledge base kb.
func (c Caller) May(kb string) bool {
	return slices.Contains(c.KnowledgeBases, "*") || slices.Contains(c.KnowledgeBases, kb)
}

// Allowed reports whether the call in ctx may use knowledge base kb: always on an open
// policy, which records no caller. For what lists knowledge bases, whose calls name none.
func Allowed(ctx context.Context, kb string) bool {
	c, ok := CallerFrom(ctx)
	return !ok || c.May(kb)
}

type callerKey struct{}

// CallerFrom returns the key that authorized the call in ctx; false on an open policy.
func CallerFrom(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}

// withCaller records k in ctx as the call's caller, and what Recheck needs to authorize
// the call again.
func withCaller(ctx context.Context, p *Policy, method string, k *parsedKey) context.Context {
	if k == nil {
		return ctx
	}
	ctx = context.WithValue(ctx, callerKey{}, k.caller())
	return context.WithValue(ctx, recheckKey{}, recheck{p, method})
}

func (k *parsedKey) caller() Caller {
	return Caller{Name: k.Name, ID: k.SHA256, Limits: k.Limits, KnowledgeBases: k.KnowledgeBases}
}

type recheckKey struct{}

type recheck struct {
	p      *Policy
	method string
}

// Recheck authorizes the call in ctx again, against the keys as they are now, for a
// call that outlives changes to the keys file (a watch): it returns the key's current
// rights, as CallerFrom does, or an UNAUTHENTICATED or PERMISSION_DENIED status once the
// key is revoked or loses the method. A call no policy checked (an open one) passes,
// with no caller.
func Recheck(ctx context.Context) (Caller, bool, error) {
	r, ok := ctx.Value(recheckKey{}).(recheck)
	if !ok {
		return Caller{}, false, nil
	}
	k, err := r.p.authorize(ctx, r.method, "")
	if err != nil {
		return Caller{}, false, toStatus(err)
	}
	return k.caller(), true, nil
}

func (p *Policy) needsWrite(method string) bool {
	if p.writeMethods[method] {
		return true
	}
	if i := strings.LastIndexByte(method, '/'); i > 0 {
		return p.writeMethods[method[:i+1]]
	}
	return false
}

// lookup returns the key of keys that md's bearer key is, or nil.
func lookup(keys []parsedKey, md metadata.MD) *parsedKey {
	key, ok := bearer(md)
	if !ok {
		return nil
	}
	sum := sha256.Sum256([]byte(key))
	var match *parsedKey
	// Compare against every key, in constant time, so timing tells nothing.
	for i := range keys {
		if subtle.ConstantTimeCompare(sum[:], keys[i].hash) == 1 {
			match = &keys[i]
		}
	}
	return match
}

func bearer(md metadata.MD) (string, bool) {
	for _, v := range md.Get("authorization") {
		// The scheme is case-insensitive (RFC 7235); clients send "bearer" too.
		scheme, k, ok := strings.Cut(strings.TrimSpace(v), " ")
		if k = strings.TrimSpace(k); ok && strings.EqualFold(scheme, "Bearer") && k != "" {
			return k, true
		}
	}
	return "", false
}

// knowledgeBase finds the knowledge base a request names: every Quarry request has a
// knowledge_base field, or wraps a message that has one (QueryStreamRequest).
func knowledgeBase(req any) string {
	m, ok := req.(proto.Message)
	if !ok {
		return ""
	}
	return kbField(m.ProtoReflect(), 1)
}

func kbField(m protoreflect.Message, depth int) string {
	fields := m.Descriptor().Fields()
	if fd := fields.ByName("knowledge_base"); fd != nil && fd.Kind() == protoreflect.StringKind {
		return m.Get(fd).String()
	}
	if depth == 0 {
		return ""
	}
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.Kind() == protoreflect.MessageKind && !fd.IsList() && !fd.IsMap() && m.Has(fd) {
			if kb := kbField(m.Get(fd).Message(), depth-1); kb != "" {
				return kb
			}
		}
	}
	return ""
}

func toStatus(err error) error {
	switch {
	case errors.Is(err, ErrUnauthenticated):
		return status.Error(codes.Unauthenticated, "missing or unknown API key (send authorization: Bearer <key>)")
	case errors.Is(err, ErrDenied):
		// No hint whether the knowledge base exists.
		return status.Error(codes.PermissionDenied, "this API key may not do that")
	default:
		return status.Error(codes.Internal, "authorization failed")
	}
}

// Tap refuses a call without a key the policy knows as soon as its headers arrive,
// before its message is read: the interceptors run only once a unary request is in
// memory, so until then a keyless client could make the server hold a message of up to
// the receive limit on every stream it opens. The interceptors still authorize each
// call, on the knowledge base its request names.
//
// The tap runs on the connection's reader goroutine, which must not wait on the file
// system: it reads the keys as they are, without looking at the keys file. When a key
// is unknown and it is time to look (once a second), it starts the look on a goroutine
// of its own and lets that one call through, whose interceptor waits for the look before
// deciding: a key just added to the file is taken at its first call, and a keyless
// client gets one call a second past the tap at most. The look is not left to the
// interceptor: a call may never reach one (an unknown method, a message that does not
// decode), and a keyless client sending only such calls would take every look, so that
// the file was never read again and a revoked key stayed valid.
func (p *Policy) Tap(skip func(method string) bool) tap.ServerInHandle {
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if p.Open() || (skip != nil && skip(info.FullMethodName)) {
			return ctx, nil
		}
		if lookup(p.held(), info.Header) != nil {
			return ctx, nil
		}
		if p.file != nil && p.file.Claim() {
			looked := make(chan struct{})
			go func() {
				defer close(looked)
				p.file.Refresh()
			}()
			return context.WithValue(ctx, lookAgainKey{}, looked), nil
		}
		p.noteRefused(info.FullMethodName)
		return ctx, toStatus(ErrUnauthenticated)
	}
}

type lookAgainKey struct{}

// lookIfHanded waits for the look at the keys file that Tap started for the call in
// ctx, if it did. The interceptors call it once per call, before they authorize it;
// what else authorizes the call later (each message of a stream, Recheck) reads the
// keys as Get does.
func (p *Policy) lookIfHanded(ctx context.Context) {
	if looked, ok := ctx.Value(lookAgainKey{}).(chan struct{}); ok {
		select {
		case <-looked:
		case <-ctx.Done(): // refused below, or by its own end, whatever the file says
		}
	}
}

// refusedLogEvery bounds the log lines of calls Tap refuses: one per interval at most,
// counting them, so that a client without a key cannot flood the log.
const refusedLogEvery = 10 * time.Second

// noteRefused counts a call Tap refused, and logs the count now and then. Such calls
// reach neither the call log nor the gRPC metrics, which see only calls past the tap.
// The line is written on a goroutine of its own: the tap's must not wait on the log.
func (p *Policy) noteRefused(method string) {
	n := p.refused.Add(1)
	now := time.Now().UnixNano()
	last := p.loggedAt.Load()
	if now-last < int64(refusedLogEvery) || !p.loggedAt.CompareAndSwap(last, now) {
		return
	}
	since := n - p.refusedLogged.Swap(n)
	log := p.log
	if log == nil {
		log = slog.Default()
	}
	go log.Info("calls refused before their message was read: no API key, or an unknown one",
		"calls", since, "last_method", method)
}

// UnaryInterceptor authorizes each unary call on the knowledge base its request names.
func (p *Policy) UnaryInterceptor(skip func(method string) bool) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if p.Open() || (skip != nil && skip(info.FullMethod)) {
			return handler(ctx, req)
		}
		p.lookIfHanded(ctx)
		k, err := p.authorize(ctx, info.FullMethod, knowledgeBase(req))
		if err != nil {
			return nil, toStatus(err)
		}
		return handler(withCaller(ctx, p, info.FullMethod, k), req)
	}
}

// StreamInterceptor authorizes streaming calls: the key when the stream opens, and the
// knowledge base of every message the client sends.
func (p *Policy) StreamInterceptor(skip func(method string) bool) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if p.Open() || (skip != nil && skip(info.FullMethod)) {
			return handler(srv, ss)
		}
		p.lookIfHanded(ss.Context())
		k, err := p.authorize(ss.Context(), info.FullMethod, "")
		if err != nil {
			return toStatus(err)
		}
		return handler(srv, &checkedStream{ServerStream: ss, ctx: withCaller(ss.Context(), p, info.FullMethod, k), p: p, method: info.FullMethod})
	}
}

type checkedStream struct {
	grpc.ServerStream
	ctx    context.Context
	p      *Policy
	method string
}

func (s *checkedStream) Context() context.Context { return s.ctx }

func (s *checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if _, err := s.p.Authorize(s.Context(), s.method, knowledgeBase(m)); err != nil {
		return toStatus(err)
	}
	return nil
}
