// Package meilitest is a scripted Meilisearch for tests: an HTTP server that speaks the
// part of the Meilisearch API the meili backend uses (indexes, settings, documents,
// tasks, search and multi-search) and checks every request against the documented shapes
// (unknown fields, wrong types, unknown matching strategies, filters on attributes that
// are not filterable, missing API key), failing the test on any violation.
//
// Writes are asynchronous as in Meilisearch: a write returns a task, and the change is
// applied only when the task is processed, which happens when a client polls it (tasks
// run in order). A client that does not wait for its task does not see its write.
//
// Search ranks with a bucket sort in the spirit of Meilisearch's default ranking rules
// (words, typo, proximity, attribute, exactness) and reports a _rankingScore in [0,1]
// built the same nested way, but it is not Meilisearch's algorithm: tests should assert
// orders that hold for any engine that ranks title matches, exact matches and documents
// matching more words first, not exact scores.
package meilitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// Request is one request the server received.
type Request struct {
	Method string
	Path   string
	Body   []byte
}

// Server is a scripted Meilisearch.
type Server struct {
	*httptest.Server
	key string
	t   testing.TB

	mu         sync.Mutex
	indexes    map[string]*index
	tasks      []*task
	requests   []Request
	violations []string
	failNext   int
	failMsg    string
	// payloadLimit is the largest request body accepted, Meilisearch's
	// --http-payload-size-limit.
	payloadLimit int
	// down is the outage in progress (0: none); downAfter counts the tasks still
	// applied, and downAfterReqs the requests still answered, before the outage downHow
	// begins (0: none scheduled).
	down          Outage
	downAfter     int
	downAfterReqs int
	downHow       Outage
	// dropAnswer: the next request is handled but its answer is lost, and the server
	// goes down as dropHow says.
	dropAnswer bool
	dropHow    Outage
}

// Outage is how the server fails while it is down.
type Outage int

// Outages.
const (
	// Refused: the server stops listening and cuts its open connections, as a crashed or
	// restarting Meilisearch does: connections are refused or reset.
	Refused Outage = iota + 1
	// Unavailable: every request gets HTTP 503 with a plain-text body, as from a proxy in
	// front of a server that is not there.
	Unavailable
)

type index struct {
	uid        string
	primaryKey string
	created    time.Time
	settings   settings
	docs       map[string]map[string]any
	order      []string // insertion order of ids: Meilisearch's tie-break
}

type settings struct {
	RankingRules         []string       `json:"rankingRules"`
	SearchableAttributes []string       `json:"searchableAttributes"`
	DisplayedAttributes  []string       `json:"displayedAttributes"`
	FilterableAttributes []string       `json:"filterableAttributes"`
	SortableAttributes   []string       `json:"sortableAttributes"`
	StopWords            []string       `json:"stopWords"`
	Synonyms             map[string]any `json:"synonyms"`
	DistinctAttribute    *string        `json:"distinctAttribute"`
	TypoTolerance        typoTolerance  `json:"typoTolerance"`
	Pagination           pagination     `json:"pagination"`
}

type typoTolerance struct {
	Enabled             bool     `json:"enabled"`
	MinWordSizeForTypos minWord  `json:"minWordSizeForTypos"`
	DisableOnWords      []string `json:"disableOnWords"`
	DisableOnAttributes []string `json:"disableOnAttributes"`
	DisableOnNumbers    bool     `json:"disableOnNumbers"`
}

type minWord struct {
	OneTypo  int `json:"oneTypo"`
	TwoTypos int `json:"twoTypos"`
}

type pagination struct {
	MaxTotalHits int `json:"maxTotalHits"`
}

func defaultSettings() settings {
	return settings{
		RankingRules:         []string{"words", "typo", "proximity", "attribute", "sort", "exactness"},
		SearchableAttributes: []string{"*"},
		DisplayedAttributes:  []string{"*"},
		FilterableAttributes: []string{},
		SortableAttributes:   []string{},
		StopWords:            []string{},
		Synonyms:             map[string]any{},
		TypoTolerance:        typoTolerance{Enabled: true, MinWordSizeForTypos: minWord{5, 9}, DisableOnWords: []string{}, DisableOnAttributes: []string{}},
		Pagination:           pagination{MaxTotalHits: 1000},
	}
}

type task struct {
	UID        int64          `json:"uid"`
	IndexUID   string         `json:"indexUid"`
	Status     string         `json:"status"`
	Type       string         `json:"type"`
	Error      *apiError      `json:"error,omitempty"`
	Details    map[string]any `json:"details,omitempty"`
	EnqueuedAt time.Time      `json:"enqueuedAt"`
	StartedAt  *time.Time     `json:"startedAt,omitempty"`
	FinishedAt *time.Time     `json:"finishedAt,omitempty"`
	apply      func() *apiError
	polled     bool
}

type apiError struct {
	Message string `json:"message"`
	Code    string `json:"code"`
	Type    string `json:"type"`
	Link    string `json:"link"`
}

// New starts a server that requires key ("" for none) and stops it when the test ends,
// failing the test if any request broke the documented API.
func New(t testing.TB, key string) *Server {
	t.Helper()
	s := &Server{key: key, t: t, indexes: map[string]*index{}, payloadLimit: DefaultPayloadLimit}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(func() {
		s.Close()
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, v := range s.violations {
			t.Errorf("meilitest: request breaks the Meilisearch API: %s", v)
		}
	})
	return s
}

// DefaultPayloadLimit is Meilisearch's default --http-payload-size-limit ("100 MB"; the
// smaller reading of it).
const DefaultPayloadLimit = 100_000_000

// SetPayloadLimit makes the server refuse request bodies over n bytes with 413
// payload_too_large, as Meilisearch started with --http-payload-size-limit n does.
func (s *Server) SetPayloadLimit(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.payloadLimit = n
}

// FailNextTasks makes the next n write tasks (documents or settings) fail with message,
// as Meilisearch reports a failed task: the task's status is "failed" and nothing of it
// is applied.
func (s *Server) FailNextTasks(n int, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext, s.failMsg = n, message
}

// Down makes the server fail every request as how says, until Up.
func (s *Server) Down(how Outage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.goDown(how)
}

// DownAfterTasks lets the server apply n more tasks (reporting each one's status as
// usual), then go down as how says: a write in progress loses the server between two of
// its requests.
func (s *Server) DownAfterTasks(n int, how Outage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n <= 0 {
		s.goDown(how)
		return
	}
	s.downAfter, s.downHow = n, how
}

// DownAfterRequests lets the server answer n more requests, then go down as how says: a
// write whose documents were accepted loses the server while it waits for its task.
func (s *Server) DownAfterRequests(n int, how Outage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n <= 0 {
		s.goDown(how)
		return
	}
	s.downAfterReqs, s.downHow = n, how
}

// DropAnswerThenDown lets the server handle the next request (a write's task is
// enqueued) but cuts its connection instead of answering, and then go down as how says:
// the client never learns the task's uid.
func (s *Server) DropAnswerThenDown(how Outage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropAnswer, s.dropHow = true, how
}

// goDown starts an outage; the caller holds mu.
func (s *Server) goDown(how Outage) {
	s.down, s.downAfter, s.downAfterReqs = how, 0, 0
	if how == Refused {
		// New connections are refused; requests on open ones are cut (serve).
		_ = s.Listener.Close()
	}
}

// Up ends an outage: the server answers again, at the same address, with everything
// it held before.
func (s *Server) Up() {
	s.mu.Lock()
	defer s.mu.Unlock()
	how := s.down
	s.down, s.downAfter, s.downAfterReqs = 0, 0, 0
	if how != Refused {
		return
	}
	l, err := net.Listen("tcp", s.Listener.Addr().String())
	if err != nil {
		s.t.Errorf("meilitest: listen again on %s: %v", s.Listener.Addr(), err)
		return
	}
	s.Listener = l
	go func() { _ = s.Config.Serve(l) }()
}

// Requests returns the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// Count returns how many requests had this method and path.
func (s *Server) Count(method, path string) int {
	n := 0
	for _, r := range s.Requests() {
		if r.Method == method && r.Path == path {
			n++
		}
	}
	return n
}

// Documents returns the documents of an index as applied (pending tasks excluded).
func (s *Server) Documents(uid string) []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	ix := s.indexes[uid]
	if ix == nil {
		return nil
	}
	out := make([]map[string]any, 0, len(ix.order))
	for _, id := range ix.order {
		out = append(out, ix.docs[id])
	}
	return out
}

// Settings returns an index's settings as applied, encoded as Meilisearch returns them.
func (s *Server) Settings(uid string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	ix := s.indexes[uid]
	if ix == nil {
		return nil
	}
	raw, _ := json.Marshal(ix.settings)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return out
}

func (s *Server) violate(format string, args ...any) {
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
}

var (
	uidPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,400}$`)
	idPattern  = regexp.MustCompile(`^[A-Za-z0-9_-]{1,511}$`)
)

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Body: body})
	switch s.down {
	case Refused:
		// A request on a connection opened before the outage: cut it without an answer.
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	case Unavailable:
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "no healthy upstream")
		return
	}
	if s.dropAnswer {
		s.dropAnswer = false
		// Handled into a recorder whose answer is thrown away; the connection is cut.
		defer func() {
			if hj, ok := w.(http.Hijacker); ok {
				if conn, _, err := hj.Hijack(); err == nil {
					_ = conn.Close()
				}
			}
			s.goDown(s.dropHow)
		}()
		w = httptest.NewRecorder()
	}
	if s.downAfterReqs > 0 {
		if s.downAfterReqs--; s.downAfterReqs == 0 {
			// This request still gets its answer; the next one finds the server down.
			defer s.goDown(s.downHow)
		}
	}

	if s.key != "" {
		auth := r.Header.Get("Authorization")
		switch {
		case auth == "":
			s.violate("%s %s without an Authorization header", r.Method, r.URL.Path)
			writeErr(w, 401, "missing_authorization_header", "auth", "The Authorization header is missing.")
			return
		case auth != "Bearer "+s.key:
			writeErr(w, 403, "invalid_api_key", "auth", "The provided API key is invalid.")
			return
		}
	}
	if len(body) > s.payloadLimit {
		writeErr(w, http.StatusRequestEntityTooLarge, "payload_too_large", "invalid_request",
			fmt.Sprintf("The provided payload reached the size limit. The maximum accepted payload size is %d B.", s.payloadLimit))
		return
	}
	if len(body) > 0 && !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		s.violate("%s %s with Content-Type %q", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
		writeErr(w, 415, "invalid_content_type", "invalid_request", "The Content-Type header is not supported.")
		return
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/health":
		writeJSON(w, 200, map[string]string{"status": "available"})
	case r.Method == http.MethodGet && r.URL.Path == "/tasks":
		s.listTasks(w, r)
	case r.Method == http.MethodGet && len(parts) == 2 && parts[0] == "tasks":
		s.getTask(w, parts[1])
	case r.Method == http.MethodPost && r.URL.Path == "/indexes":
		s.createIndex(w, body)
	case r.Method == http.MethodPost && r.URL.Path == "/multi-search":
		s.multiSearch(w, body)
	case len(parts) >= 2 && parts[0] == "indexes":
		s.indexRoute(w, r, parts[1], parts[2:], body)
	default:
		s.violate("unexpected request %s %s", r.Method, r.URL.Path)
		writeErr(w, 404, "not_found", "invalid_request", "no such route")
	}
}

func (s *Server) indexRoute(w http.ResponseWriter, r *http.Request, uid string, rest []string, body []byte) {
	route := r.Method + " " + strings.Join(rest, "/")
	ix := s.indexes[uid]
	if ix == nil {
		writeErr(w, 404, "index_not_found", "invalid_request", fmt.Sprintf("Index `%s` not found.", uid))
		return
	}
	switch route {
	case "GET ":
		writeJSON(w, 200, map[string]any{"uid": ix.uid, "primaryKey": ix.primaryKey, "createdAt": ix.created, "updatedAt": ix.created})
	case "GET settings":
		writeJSON(w, 200, ix.settings)
	case "PATCH settings":
		s.updateSettings(w, ix, body)
	case "DELETE settings/stop-words":
		s.enqueue(w, ix.uid, "settingsUpdate", func() *apiError {
			ix.settings.StopWords = []string{}
			return nil
		})
	case "DELETE settings/synonyms":
		s.enqueue(w, ix.uid, "settingsUpdate", func() *apiError {
			ix.settings.Synonyms = map[string]any{}
			return nil
		})
	case "DELETE settings/distinct-attribute":
		s.enqueue(w, ix.uid, "settingsUpdate", func() *apiError {
			ix.settings.DistinctAttribute = nil
			return nil
		})
	case "POST documents":
		s.addDocuments(w, r, ix, body)
	case "POST documents/fetch":
		s.fetchDocuments(w, ix, body)
	case "POST documents/delete-batch":
		s.deleteDocuments(w, ix, body)
	case "POST search":
		var req searchRequest
		if !s.decode(w, "search", body, &req) {
			return
		}
		if req.IndexUID != nil || req.FederationOptions != nil {
			s.violate("search on /indexes/%s/search carries indexUid or federationOptions", uid)
		}
		res, e := s.search(ix, req)
		if e != nil {
			writeErr(w, 400, e.Code, e.Type, e.Message)
			return
		}
		writeJSON(w, 200, res)
	default:
		s.violate("unexpected request %s /indexes/%s/%s", r.Method, uid, strings.Join(rest, "/"))
		writeErr(w, 404, "not_found", "invalid_request", "no such route")
	}
}

// decode reads a JSON body strictly, as Meilisearch does: an unknown field or a wrong
// type is a 400 and a violation.
func (s *Server) decode(w http.ResponseWriter, what string, body []byte, v any) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		s.violate("%s body %s: %v", what, body, err)
		writeErr(w, 400, "bad_request", "invalid_request", err.Error())
		return false
	}
	return true
}

func (s *Server) enqueue(w http.ResponseWriter, uid, typ string, apply func() *apiError) {
	t := &task{UID: int64(len(s.tasks)), IndexUID: uid, Status: "enqueued", Type: typ, EnqueuedAt: time.Now().UTC(), apply: apply}
	if s.failNext > 0 && typ != "indexCreation" {
		s.failNext--
		msg := s.failMsg
		t.apply = func() *apiError { return &apiError{Message: msg, Code: "internal", Type: "internal"} }
	}
	s.tasks = append(s.tasks, t)
	writeJSON(w, 202, map[string]any{"taskUid": t.UID, "indexUid": uid, "status": t.Status, "type": typ, "enqueuedAt": t.EnqueuedAt})
}

// process runs every enqueued task up to and including uid, in order.
func (s *Server) process(uid int64) {
	for _, t := range s.tasks[:uid+1] {
		if t.Status != "enqueued" {
			continue
		}
		now := time.Now().UTC()
		t.StartedAt = &now
		if e := t.apply(); e != nil {
			t.Status, t.Error = "failed", e
		} else {
			t.Status = "succeeded"
		}
		done := time.Now().UTC()
		t.FinishedAt = &done
		if s.downAfter > 0 {
			if s.downAfter--; s.downAfter == 0 {
				// This request still gets its answer; the next one finds the server down.
				s.goDown(s.downHow)
			}
		}
	}
}

func (s *Server) getTask(w http.ResponseWriter, id string) {
	uid, err := strconv.ParseInt(id, 10, 64)
	if err != nil || uid < 0 || uid >= int64(len(s.tasks)) {
		writeErr(w, 404, "task_not_found", "invalid_request", "Task `"+id+"` not found.")
		return
	}
	t := s.tasks[uid]
	if t.Status == "enqueued" && !t.polled {
		// Reported once as still enqueued, so a client that does not poll until the task
		// is done is caught.
		t.polled = true
		writeJSON(w, 200, t)
		return
	}
	s.process(uid)
	writeJSON(w, 200, t)
}

// listTasks answers GET /tasks with the filters the backend uses (indexUids, statuses,
// limit, from), newest first as Meilisearch lists them. Listing processes nothing.
func (s *Server) listTasks(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k := range q {
		switch k {
		case "indexUids", "statuses", "limit", "from", "types", "uids":
		default:
			s.violate("GET /tasks with unknown parameter %q", k)
		}
	}
	split := func(k string) []string {
		if v := q.Get(k); v != "" && v != "*" {
			return strings.Split(v, ",")
		}
		return nil
	}
	indexes, statuses := split("indexUids"), split("statuses")
	for _, st := range statuses {
		switch st {
		case "enqueued", "processing", "succeeded", "failed", "canceled":
		default:
			s.violate("GET /tasks with unknown status %q", st)
			writeErr(w, 400, "invalid_task_statuses", "invalid_request", "unknown status "+st)
			return
		}
	}
	limit, from := 20, int64(-1)
	if v := q.Get("limit"); v != "" {
		limit, _ = strconv.Atoi(v)
	}
	if v := q.Get("from"); v != "" {
		from, _ = strconv.ParseInt(v, 10, 64)
	}
	results := []*task{}
	total := 0
	var next any
	for i := len(s.tasks) - 1; i >= 0; i-- {
		t := s.tasks[i]
		if (indexes != nil && !slices.Contains(indexes, t.IndexUID)) || (statuses != nil && !slices.Contains(statuses, t.Status)) {
			continue
		}
		total++
		if from >= 0 && t.UID > from {
			continue
		}
		if len(results) == limit {
			if next == nil {
				next = t.UID
			}
			continue
		}
		results = append(results, t)
	}
	var first any
	if len(results) > 0 {
		first = results[0].UID
	}
	writeJSON(w, 200, map[string]any{"results": results, "total": total, "limit": limit, "from": first, "next": next})
}

func (s *Server) createIndex(w http.ResponseWriter, body []byte) {
	var req struct {
		UID        string `json:"uid"`
		PrimaryKey string `json:"primaryKey,omitempty"`
	}
	if !s.decode(w, "create index", body, &req) {
		return
	}
	if !uidPattern.MatchString(req.UID) {
		s.violate("index uid %q is not [A-Za-z0-9_-]{1,400}", req.UID)
		writeErr(w, 400, "invalid_index_uid", "invalid_request", "invalid index uid")
		return
	}
	uid, pk := req.UID, req.PrimaryKey
	s.enqueue(w, uid, "indexCreation", func() *apiError {
		if s.indexes[uid] != nil {
			return &apiError{Message: "Index `" + uid + "` already exists.", Code: "index_already_exists", Type: "invalid_request"}
		}
		s.indexes[uid] = &index{uid: uid, primaryKey: pk, created: time.Now().UTC(), settings: defaultSettings(), docs: map[string]map[string]any{}}
		return nil
	})
}

// settingsPatch is the documented body of PATCH /indexes/{uid}/settings.
type settingsPatch struct {
	DisplayedAttributes  *[]string       `json:"displayedAttributes"`
	SearchableAttributes *[]string       `json:"searchableAttributes"`
	FilterableAttributes *[]string       `json:"filterableAttributes"`
	SortableAttributes   *[]string       `json:"sortableAttributes"`
	RankingRules         *[]string       `json:"rankingRules"`
	StopWords            *[]string       `json:"stopWords"`
	NonSeparatorTokens   *[]string       `json:"nonSeparatorTokens"`
	SeparatorTokens      *[]string       `json:"separatorTokens"`
	Dictionary           *[]string       `json:"dictionary"`
	Synonyms             map[string]any  `json:"synonyms"`
	DistinctAttribute    *string         `json:"distinctAttribute"`
	ProximityPrecision   *string         `json:"proximityPrecision"`
	TypoTolerance        *typoPatch      `json:"typoTolerance"`
	Faceting             json.RawMessage `json:"faceting"`
	Pagination           *struct {
		MaxTotalHits *int `json:"maxTotalHits"`
	} `json:"pagination"`
	Embedders           json.RawMessage `json:"embedders"`
	SearchCutoffMs      *int            `json:"searchCutoffMs"`
	LocalizedAttributes json.RawMessage `json:"localizedAttributes"`
	FacetSearch         *bool           `json:"facetSearch"`
	PrefixSearch        *string         `json:"prefixSearch"`
}

type typoPatch struct {
	Enabled             *bool `json:"enabled"`
	MinWordSizeForTypos *struct {
		OneTypo  *int `json:"oneTypo"`
		TwoTypos *int `json:"twoTypos"`
	} `json:"minWordSizeForTypos"`
	DisableOnWords      *[]string `json:"disableOnWords"`
	DisableOnAttributes *[]string `json:"disableOnAttributes"`
	DisableOnNumbers    *bool     `json:"disableOnNumbers"`
}

var rankingRules = map[string]bool{"words": true, "typo": true, "proximity": true, "attribute": true, "sort": true, "exactness": true}

func (s *Server) updateSettings(w http.ResponseWriter, ix *index, body []byte) {
	var p settingsPatch
	if !s.decode(w, "settings", body, &p) {
		return
	}
	if p.RankingRules != nil {
		for _, r := range *p.RankingRules {
			if !rankingRules[r] && !strings.HasSuffix(r, ":asc") && !strings.HasSuffix(r, ":desc") {
				s.violate("unknown ranking rule %q", r)
				writeErr(w, 400, "invalid_settings_ranking_rules", "invalid_request", "unknown ranking rule "+r)
				return
			}
		}
	}
	if t := p.TypoTolerance; t != nil && t.MinWordSizeForTypos != nil {
		one, two := ix.settings.TypoTolerance.MinWordSizeForTypos.OneTypo, ix.settings.TypoTolerance.MinWordSizeForTypos.TwoTypos
		if t.MinWordSizeForTypos.OneTypo != nil {
			one = *t.MinWordSizeForTypos.OneTypo
		}
		if t.MinWordSizeForTypos.TwoTypos != nil {
			two = *t.MinWordSizeForTypos.TwoTypos
		}
		if one < 0 || two > 255 || one > two {
			s.violate("typo tolerance minWordSizeForTypos %d/%d: want 0 <= oneTypo <= twoTypos <= 255", one, two)
			writeErr(w, 400, "invalid_settings_typo_tolerance", "invalid_request", "bad minWordSizeForTypos")
			return
		}
	}
	s.enqueue(w, ix.uid, "settingsUpdate", func() *apiError {
		st := &ix.settings
		set := func(dst *[]string, src *[]string) {
			if src != nil {
				*dst = slices.Clone(*src)
			}
		}
		set(&st.DisplayedAttributes, p.DisplayedAttributes)
		set(&st.SearchableAttributes, p.SearchableAttributes)
		set(&st.FilterableAttributes, p.FilterableAttributes)
		set(&st.SortableAttributes, p.SortableAttributes)
		set(&st.RankingRules, p.RankingRules)
		if p.StopWords != nil {
			st.StopWords = slices.Clone(*p.StopWords)
			sort.Strings(st.StopWords)
		}
		if t := p.TypoTolerance; t != nil {
			if t.Enabled != nil {
				st.TypoTolerance.Enabled = *t.Enabled
			}
			if m := t.MinWordSizeForTypos; m != nil {
				if m.OneTypo != nil {
					st.TypoTolerance.MinWordSizeForTypos.OneTypo = *m.OneTypo
				}
				if m.TwoTypos != nil {
					st.TypoTolerance.MinWordSizeForTypos.TwoTypos = *m.TwoTypos
				}
			}
			set(&st.TypoTolerance.DisableOnWords, t.DisableOnWords)
			set(&st.TypoTolerance.DisableOnAttributes, t.DisableOnAttributes)
			if t.DisableOnNumbers != nil {
				st.TypoTolerance.DisableOnNumbers = *t.DisableOnNumbers
			}
		}
		if p.Pagination != nil && p.Pagination.MaxTotalHits != nil {
			st.Pagination.MaxTotalHits = *p.Pagination.MaxTotalHits
		}
		// Kept and reported, not applied by search.
		if p.Synonyms != nil {
			st.Synonyms = p.Synonyms
		}
		if p.DistinctAttribute != nil {
			d := *p.DistinctAttribute
			st.DistinctAttribute = &d
		}
		return nil
	})
}

func (s *Server) addDocuments(w http.ResponseWriter, r *http.Request, ix *index, body []byte) {
	var docs []map[string]any
	if !s.decode(w, "documents", body, &docs) {
		return
	}
	pk := r.URL.Query().Get("primaryKey")
	for k := range r.URL.Query() {
		if k != "primaryKey" && k != "customMetadata" {
			s.violate("add documents with unknown query parameter %q", k)
		}
	}
	s.enqueue(w, ix.uid, "documentAdditionOrUpdate", func() *apiError {
		if pk != "" {
			if ix.primaryKey != "" && ix.primaryKey != pk {
				return &apiError{Message: "primary key mismatch", Code: "index_primary_key_already_exists", Type: "invalid_request"}
			}
			ix.primaryKey = pk
		}
		key := ix.primaryKey
		if key == "" {
			return &apiError{Message: "no primary key", Code: "index_primary_key_no_candidate_found", Type: "invalid_request"}
		}
		for _, d := range docs {
			id, ok := d[key].(string)
			if !ok || !idPattern.MatchString(id) {
				return &apiError{Message: fmt.Sprintf("Document identifier `%v` is invalid.", d[key]), Code: "invalid_document_id", Type: "invalid_request"}
			}
		}
		for _, d := range docs {
			id := d[key].(string)
			if _, ok := ix.docs[id]; !ok {
				ix.order = append(ix.order, id)
			}
			ix.docs[id] = d
		}
		return nil
	})
}

func (s *Server) fetchDocuments(w http.ResponseWriter, ix *index, body []byte) {
	var req struct {
		Offset          *int            `json:"offset"`
		Limit           *int            `json:"limit"`
		Fields          []string        `json:"fields"`
		Filter          json.RawMessage `json:"filter"`
		RetrieveVectors *bool           `json:"retrieveVectors"`
		IDs             []string        `json:"ids"`
		Sort            []string        `json:"sort"`
	}
	if !s.decode(w, "documents fetch", body, &req) {
		return
	}
	offset, limit := 0, 20
	if req.Offset != nil {
		offset = *req.Offset
	}
	if req.Limit != nil {
		limit = *req.Limit
	}
	results := []map[string]any{}
	for i, id := range ix.order {
		if i < offset || len(results) >= limit {
			continue
		}
		results = append(results, project(ix.docs[id], req.Fields, ix.settings.DisplayedAttributes))
	}
	writeJSON(w, 200, map[string]any{"results": results, "offset": offset, "limit": limit, "total": len(ix.order)})
}

func (s *Server) deleteDocuments(w http.ResponseWriter, ix *index, body []byte) {
	var ids []string
	if !s.decode(w, "delete batch", body, &ids) {
		return
	}
	s.enqueue(w, ix.uid, "documentDeletion", func() *apiError {
		for _, id := range ids {
			if _, ok := ix.docs[id]; ok {
				delete(ix.docs, id)
				ix.order = slices.DeleteFunc(ix.order, func(x string) bool { return x == id })
			}
		}
		return nil
	})
}

// searchRequest is the documented body of a search (and of one multi-search query).
type searchRequest struct {
	Q                       *string         `json:"q"`
	Offset                  *int            `json:"offset"`
	Limit                   *int            `json:"limit"`
	HitsPerPage             *int            `json:"hitsPerPage"`
	Page                    *int            `json:"page"`
	Filter                  json.RawMessage `json:"filter"`
	Facets                  []string        `json:"facets"`
	Distinct                *string         `json:"distinct"`
	AttributesToRetrieve    []string        `json:"attributesToRetrieve"`
	AttributesToCrop        []string        `json:"attributesToCrop"`
	CropLength              *int            `json:"cropLength"`
	CropMarker              *string         `json:"cropMarker"`
	AttributesToHighlight   []string        `json:"attributesToHighlight"`
	HighlightPreTag         *string         `json:"highlightPreTag"`
	HighlightPostTag        *string         `json:"highlightPostTag"`
	ShowMatchesPosition     *bool           `json:"showMatchesPosition"`
	Sort                    []string        `json:"sort"`
	MatchingStrategy        *string         `json:"matchingStrategy"`
	ShowRankingScore        *bool           `json:"showRankingScore"`
	ShowRankingScoreDetails *bool           `json:"showRankingScoreDetails"`
	ShowPerformanceDetails  *bool           `json:"showPerformanceDetails"`
	RankingScoreThreshold   *float64        `json:"rankingScoreThreshold"`
	AttributesToSearchOn    []string        `json:"attributesToSearchOn"`
	Hybrid                  json.RawMessage `json:"hybrid"`
	Vector                  []float64       `json:"vector"`
	RetrieveVectors         *bool           `json:"retrieveVectors"`
	Locales                 []string        `json:"locales"`
	Media                   json.RawMessage `json:"media"`
	IndexUID                *string         `json:"indexUid"`
	FederationOptions       json.RawMessage `json:"federationOptions"`
}

func (s *Server) multiSearch(w http.ResponseWriter, body []byte) {
	var req struct {
		Federation json.RawMessage  `json:"federation"`
		Queries    []*searchRequest `json:"queries"`
	}
	if !s.decode(w, "multi-search", body, &req) {
		return
	}
	if len(req.Federation) > 0 && string(req.Federation) != "null" {
		s.violate("multi-search with federation, which merges results: the backend needs them per query")
	}
	results := make([]any, 0, len(req.Queries))
	for i, q := range req.Queries {
		if q.IndexUID == nil || *q.IndexUID == "" {
			s.violate("multi-search query %d without indexUid", i)
			writeErr(w, 400, "missing_index_uid", "invalid_request", "indexUid is required")
			return
		}
		ix := s.indexes[*q.IndexUID]
		if ix == nil {
			writeErr(w, 404, "index_not_found", "invalid_request", fmt.Sprintf("Inside `.queries[%d]`: Index `%s` not found.", i, *q.IndexUID))
			return
		}
		res, e := s.search(ix, *q)
		if e != nil {
			writeErr(w, 400, e.Code, e.Type, fmt.Sprintf("Inside `.queries[%d]`: %s", i, e.Message))
			return
		}
		res["indexUid"] = ix.uid
		results = append(results, res)
	}
	writeJSON(w, 200, map[string]any{"results": results})
}

var strategies = map[string]bool{"last": true, "all": true, "frequency": true}

func (s *Server) search(ix *index, req searchRequest) (map[string]any, *apiError) {
	if req.MatchingStrategy != nil && !strategies[*req.MatchingStrategy] {
		s.violate("unknown matchingStrategy %q", *req.MatchingStrategy)
		return nil, &apiError{Message: "unknown matching strategy", Code: "invalid_search_matching_strategy", Type: "invalid_request"}
	}
	if len(req.Hybrid) > 0 && string(req.Hybrid) != "null" {
		s.violate("hybrid search requested: the index has no embedder")
	}
	limit := 20
	if req.Limit != nil {
		if *req.Limit < 0 {
			return nil, &apiError{Message: "limit must be >= 0", Code: "invalid_search_limit", Type: "invalid_request"}
		}
		limit = *req.Limit
	}
	filter, e := s.parseFilter(ix, req.Filter)
	if e != nil {
		return nil, e
	}
	q := ""
	if req.Q != nil {
		q = *req.Q
	}
	strategy := "last"
	if req.MatchingStrategy != nil {
		strategy = *req.MatchingStrategy
	}
	type scored struct {
		id    string
		order int
		score float64
	}
	terms := parseQuery(q, ix.settings.StopWords)
	crops, e := s.cropOptions(ix, req)
	if e != nil {
		return nil, e
	}
	var found []scored
	for i, id := range ix.order {
		d := ix.docs[id]
		if !filter(d) {
			continue
		}
		score, ok := rankDoc(d, terms, strategy, &ix.settings)
		if !ok {
			continue
		}
		found = append(found, scored{id, i, score})
	}
	sort.SliceStable(found, func(i, j int) bool { return found[i].score > found[j].score })
	hits := []map[string]any{}
	for _, f := range found {
		if len(hits) >= limit {
			break
		}
		h := project(ix.docs[f.id], req.AttributesToRetrieve, ix.settings.DisplayedAttributes)
		if req.ShowRankingScore != nil && *req.ShowRankingScore {
			h["_rankingScore"] = f.score
		}
		if len(crops) > 0 {
			// _formatted holds the retrieved attributes and the cropped ones, cropped.
			fm := map[string]any{}
			for k, v := range h {
				if !strings.HasPrefix(k, "_") {
					fm[k] = v
				}
			}
			for attr, n := range crops {
				if v, ok := ix.docs[f.id][attr].(string); ok {
					fm[attr] = cropText(v, terms, n, cropMarkerOf(req), &ix.settings)
				}
			}
			h["_formatted"] = fm
		}
		hits = append(hits, h)
	}
	return map[string]any{"hits": hits, "query": q, "processingTimeMs": 0, "limit": limit, "offset": 0, "estimatedTotalHits": len(found)}, nil
}

// cropSet maps each attribute to crop to its crop length in words.
type cropSet map[string]int

// cropMarkerOf is the request's crop marker, or Meilisearch's default.
func cropMarkerOf(req searchRequest) string {
	if req.CropMarker != nil {
		return *req.CropMarker
	}
	return "…"
}

var cropPattern = regexp.MustCompile(`^(\*|[A-Za-z0-9_.-]+)(?::([0-9]+))?$`)

// cropOptions checks attributesToCrop ("attribute", "attribute:length" or "*" for every
// retrieved attribute), cropLength (words, default 10) and cropMarker, and returns what
// to crop. Cropping an attribute that is not displayed returns nothing in Meilisearch,
// so the backend would silently get no passage: that is a violation.
func (s *Server) cropOptions(ix *index, req searchRequest) (cropSet, *apiError) {
	length := 10
	if req.CropLength != nil {
		if *req.CropLength < 0 {
			s.violate("cropLength %d is negative", *req.CropLength)
			return nil, &apiError{Message: "cropLength must be a positive integer", Code: "invalid_search_crop_length", Type: "invalid_request"}
		}
		length = *req.CropLength
	}
	out := cropSet{}
	for _, a := range req.AttributesToCrop {
		m := cropPattern.FindStringSubmatch(a)
		if m == nil {
			s.violate("attributesToCrop entry %q is not `attribute`, `attribute:length` or `*`", a)
			return nil, &apiError{Message: "invalid attributesToCrop", Code: "invalid_search_attributes_to_crop", Type: "invalid_request"}
		}
		n := length
		if m[2] != "" {
			n, _ = strconv.Atoi(m[2])
		}
		attrs := []string{m[1]}
		if m[1] == "*" {
			attrs = req.AttributesToRetrieve
		}
		for _, attr := range attrs {
			if !slices.Contains(ix.settings.DisplayedAttributes, "*") && !slices.Contains(ix.settings.DisplayedAttributes, attr) {
				s.violate("attributesToCrop %q: the attribute is not displayed, so Meilisearch returns no crop of it", attr)
				continue
			}
			out[attr] = n
		}
	}
	return out, nil
}

// cropText keeps at most n words of v: the window holding the most distinct query terms,
// the one whose matches sit nearest its middle on a tie, from the first word when no term
// matches; marker goes where words were cut.
func cropText(v string, terms []term, n int, marker string, st *settings) string {
	toks := strings.Fields(v)
	if len(toks) <= n {
		return v
	}
	if n == 0 {
		return marker
	}
	match := make([]int, len(toks))
	for i, tok := range toks {
		match[i] = -1
		ws := words(tok)
		if len(ws) == 0 {
			continue
		}
		for ti, t := range terms {
			if len(t.words) != 1 {
				continue
			}
			if _, ok := matchAt(t, ws, 0, st.TypoTolerance.Enabled, st.TypoTolerance.MinWordSizeForTypos); ok {
				match[i] = ti
				break
			}
		}
	}
	best, bestN, bestOff := 0, 0, len(toks)
	for start := 0; start+n <= len(toks); start++ {
		seen := map[int]bool{}
		first, last := -1, -1
		for i := start; i < start+n; i++ {
			if match[i] >= 0 {
				seen[match[i]] = true
				if first < 0 {
					first = i
				}
				last = i
			}
		}
		if len(seen) == 0 {
			continue
		}
		off := abs((first + last) - (2*start + n - 1))
		if len(seen) > bestN || (len(seen) == bestN && off < bestOff) {
			best, bestN, bestOff = start, len(seen), off
		}
	}
	out := strings.Join(toks[best:best+n], " ")
	if best > 0 {
		out = marker + out
	}
	if best+n < len(toks) {
		out += marker
	}
	return out
}

var filterPattern = regexp.MustCompile(`^\s*([A-Za-z0-9_.]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s"]+))\s*$`)

// parseFilter understands `attribute = value` conditions joined by AND, the part of the
// filter grammar the backend uses, and refuses attributes that are not filterable, as
// Meilisearch does.
func (s *Server) parseFilter(ix *index, raw json.RawMessage) (func(map[string]any) bool, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return func(map[string]any) bool { return true }, nil
	}
	var expr string
	if err := json.Unmarshal(raw, &expr); err != nil {
		s.violate("filter %s is not a string", raw)
		return nil, &apiError{Message: "filter must be a string", Code: "invalid_search_filter", Type: "invalid_request"}
	}
	type cond struct{ attr, value string }
	var conds []cond
	for _, part := range strings.Split(expr, " AND ") {
		m := filterPattern.FindStringSubmatch(part)
		if m == nil {
			s.violate("filter %q is not `attribute = value` conditions joined by AND", expr)
			return nil, &apiError{Message: "invalid filter", Code: "invalid_search_filter", Type: "invalid_request"}
		}
		value := m[3]
		if m[3] == "" {
			value = strings.NewReplacer(`\"`, `"`, `\\`, `\`).Replace(m[2])
		}
		if !slices.Contains(ix.settings.FilterableAttributes, m[1]) {
			s.violate("filter on %q, which is not a filterable attribute", m[1])
			return nil, &apiError{Message: "Attribute `" + m[1] + "` is not filterable.", Code: "invalid_search_filter", Type: "invalid_request"}
		}
		conds = append(conds, cond{m[1], value})
	}
	return func(d map[string]any) bool {
		for _, c := range conds {
			if !matchesValue(d[c.attr], c.value) {
				return false
			}
		}
		return true
	}, nil
}

func matchesValue(v any, want string) bool {
	switch x := v.(type) {
	case string:
		// Meilisearch compares facet strings normalised (documented: "When operating on
		// strings, = is case-insensitive"), and stores each value truncated to
		// maxFacetValueLength bytes while the filter's value is not: a longer value
		// matches no filter at all (milli's normalize_facet, truncate_str, evaluate_equal).
		return truncateFacet(normalizeFacet(x)) == normalizeFacet(want)
	case bool:
		return strconv.FormatBool(x) == want
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64) == want
	case []any:
		for _, e := range x {
			if matchesValue(e, want) {
				return true
			}
		}
	}
	return false
}

// maxFacetValueLength is the longest facet value Meilisearch stores, in bytes (its
// MAX_FACET_VALUE_LENGTH, "Length of individual filterableAttributes values" in its known
// limitations).
const maxFacetValueLength = 468

// normalizeFacet is milli's normalize_facet: trimmed, NFKD, lower case.
func normalizeFacet(s string) string {
	return strings.ToLower(norm.NFKD.String(strings.TrimSpace(s)))
}

// truncateFacet is milli's truncate_str: the longest prefix of s, cut at a character
// boundary, of at most maxFacetValueLength bytes.
func truncateFacet(s string) string {
	if len(s) <= maxFacetValueLength {
		return s
	}
	end := 0
	for i := range s {
		if i > maxFacetValueLength {
			break
		}
		end = i
	}
	return s[:end]
}

func project(d map[string]any, fields, displayed []string) map[string]any {
	out := map[string]any{}
	for k, v := range d {
		if len(fields) > 0 && !slices.Contains(fields, k) && !slices.Contains(fields, "*") {
			continue
		}
		if !slices.Contains(displayed, "*") && !slices.Contains(displayed, k) {
			continue
		}
		out[k] = v
	}
	return out
}

// term is one query term: a word (typo and prefix tolerant) or a quoted phrase (exact).
type term struct {
	words  []string
	phrase bool
	prefix bool
}

func parseQuery(q string, stop []string) []term {
	var out []term
	rest := q
	for {
		rest = strings.TrimLeftFunc(rest, unicode.IsSpace)
		if rest == "" {
			break
		}
		if rest[0] == '"' {
			end := strings.IndexByte(rest[1:], '"')
			var inner string
			if end < 0 {
				inner, rest = rest[1:], ""
			} else {
				inner, rest = rest[1:end+1], rest[end+2:]
			}
			if ws := words(inner); len(ws) > 0 {
				out = append(out, term{words: ws, phrase: true})
			}
			continue
		}
		end := strings.IndexFunc(rest, unicode.IsSpace)
		if end < 0 {
			end = len(rest)
		}
		for _, w := range words(rest[:end]) {
			if !slices.Contains(stop, w) {
				out = append(out, term{words: []string{w}})
			}
		}
		rest = rest[end:]
	}
	// Meilisearch takes the first ten words of a query into account and ignores the rest
	// (a documented hard limit).
	n := 0
	for i, t := range out {
		if n += len(t.words); n > maxQueryWords {
			t.words = t.words[:len(t.words)-(n-maxQueryWords)]
			out = out[:i]
			if len(t.words) > 0 {
				out = append(out, t)
			}
			break
		}
	}
	// Meilisearch matches the last word as a prefix unless the query ends with a space.
	if n := len(out); n > 0 && !out[n-1].phrase && !strings.HasSuffix(q, " ") {
		out[n-1].prefix = true
	}
	return out
}

// maxQueryWords is how many words of a query Meilisearch reads.
const maxQueryWords = 10

func words(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
}

// match is how one term matched a document.
type match struct {
	typos, attr, pos int
	exact            bool
}

func better(a, b match) bool {
	if a.typos != b.typos {
		return a.typos < b.typos
	}
	if a.exact != b.exact {
		return a.exact
	}
	if a.attr != b.attr {
		return a.attr < b.attr
	}
	return a.pos < b.pos
}

func rankDoc(d map[string]any, terms []term, strategy string, st *settings) (float64, bool) {
	attrs := st.SearchableAttributes
	if slices.Contains(attrs, "*") {
		attrs = nil
		for k := range d {
			attrs = append(attrs, k)
		}
		sort.Strings(attrs)
	}
	fields := make([][]string, len(attrs))
	for i, a := range attrs {
		fields[i] = fieldWords(d[a], st.StopWords)
	}
	if len(terms) == 0 {
		return 1, true // a placeholder search returns everything
	}
	matches := make([]*match, len(terms))
	for ti, t := range terms {
		for ai, ws := range fields {
			typoOK := st.TypoTolerance.Enabled && !slices.Contains(st.TypoTolerance.DisableOnAttributes, attrs[ai])
			for pi := range ws {
				m, ok := matchAt(t, ws, pi, typoOK, st.TypoTolerance.MinWordSizeForTypos)
				if !ok {
					continue
				}
				m.attr, m.pos = ai, pi
				if matches[ti] == nil || better(m, *matches[ti]) {
					mm := m
					matches[ti] = &mm
				}
			}
		}
	}
	n := len(terms)
	k := n
	switch strategy {
	case "all":
		for _, m := range matches {
			if m == nil {
				return 0, false
			}
		}
	default:
		// "last" (and, simplified, "frequency"): the longest run of leading terms that
		// all match; phrases are always required.
		for i, m := range matches {
			if m == nil {
				if terms[i].phrase {
					return 0, false
				}
				if i < k {
					k = i
				}
			}
		}
		for i := k; i < n; i++ {
			if terms[i].phrase && matches[i] == nil {
				return 0, false
			}
		}
		if k == 0 {
			return 0, false
		}
	}
	counted := matches[:k]
	type rank struct{ r, max int }
	var ranks []rank
	for _, rule := range st.RankingRules {
		switch rule {
		case "words":
			if n > 1 {
				ranks = append(ranks, rank{k - 1, n - 1})
			}
		case "typo":
			typos := 0
			for _, m := range counted {
				typos += m.typos
			}
			ranks = append(ranks, rank{2*n - typos, 2 * n})
		case "proximity":
			if k > 1 {
				cost := 0
				for i := 1; i < k; i++ {
					a, b := counted[i-1], counted[i]
					dist := 8
					if a.attr == b.attr {
						dist = min(8, abs(b.pos-a.pos))
					}
					cost += dist - 1
				}
				ranks = append(ranks, rank{7*(k-1) - cost, 7 * (k - 1)})
			}
		case "attribute":
			per := 2*len(attrs) - 1
			r := 0
			for _, m := range counted {
				r += (len(attrs)-1-m.attr)*2 + boolInt(m.pos < 10)
			}
			ranks = append(ranks, rank{r, per * n})
		case "exactness":
			exact := 0
			for _, m := range counted {
				exact += boolInt(m.exact)
			}
			ranks = append(ranks, rank{exact, n})
		}
	}
	// Nested buckets: each rule splits its parent bucket into max+1 parts.
	lo, width := 0.0, 1.0
	for _, rk := range ranks {
		if rk.max <= 0 {
			continue
		}
		width /= float64(rk.max + 1)
		lo += width * float64(max(0, rk.r))
	}
	return lo + width, true
}

func matchAt(t term, ws []string, pi int, typoOK bool, mw minWord) (match, bool) {
	if t.phrase {
		if pi+len(t.words) > len(ws) {
			return match{}, false
		}
		for i, w := range t.words {
			if ws[pi+i] != w {
				return match{}, false
			}
		}
		return match{exact: true}, true
	}
	want, w := t.words[0], ws[pi]
	if w == want {
		return match{exact: true}, true
	}
	if t.prefix && strings.HasPrefix(w, want) {
		return match{}, true
	}
	if !typoOK {
		return match{}, false
	}
	allowed := 0
	if n := len([]rune(want)); n >= mw.TwoTypos {
		allowed = 2
	} else if n >= mw.OneTypo {
		allowed = 1
	}
	if allowed == 0 {
		return match{}, false
	}
	if d := levenshtein(want, w); d <= allowed {
		return match{typos: d}, true
	}
	return match{}, false
}

func fieldWords(v any, stop []string) []string {
	var out []string
	switch x := v.(type) {
	case string:
		out = words(x)
	case []any:
		for _, e := range x {
			if s, ok := e.(string); ok {
				out = append(out, words(s)...)
			}
		}
	}
	return slices.DeleteFunc(out, func(w string) bool { return slices.Contains(stop, w) })
}

func levenshtein(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, code int, errCode, typ, msg string) {
	writeJSON(w, code, apiError{Message: msg, Code: errCode, Type: typ, Link: "https://docs.meilisearch.com/errors#" + errCode})
}
