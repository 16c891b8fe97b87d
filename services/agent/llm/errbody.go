package llm

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"

	"github.com/openai/openai-go/v3/option"
)

// maxErrorBody bounds the refused request's body that errorObject reads to reshape;
// a longer one is passed on as it is.
const maxErrorBody = 1 << 20

// errorObject is a client middleware that gives a refused request's body the shape
// openai-go reads, {"error": {"message": ...}}. Hugging Face TGI, xAI, LM Studio and
// many proxies answer {"error": "text"}, which openai-go cannot read at all: the call
// then failed with a JSON error in place of the HTTP status, so a 429 or a 503 was not
// retried and a 422 "prompt too long" was not recognised as one.
func errorObject(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	res, err := next(req)
	if err != nil || res.StatusCode < 400 || res.Body == nil {
		return res, err
	}
	raw, err := io.ReadAll(io.LimitReader(res.Body, maxErrorBody+1))
	if err != nil || len(raw) > maxErrorBody {
		// Unread or too long to reshape: the client reads what is left as it would.
		res.Body = readCloser{io.MultiReader(bytes.NewReader(raw), res.Body), res.Body}
		return res, nil
	}
	_ = res.Body.Close()
	res.Body = io.NopCloser(bytes.NewReader(reshapeError(raw)))
	return res, nil
}

// reshapeError returns body with a top-level "error" that is not an object (TGI's
// {"error": "...", "error_type": "validation"}) made one, its text the message and
// TGI's error_type its type; any other body unchanged.
func reshapeError(body []byte) []byte {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return body
	}
	e, ok := top["error"]
	if !ok || len(e) == 0 || e[0] == '{' {
		return body
	}
	var msg string
	if json.Unmarshal(e, &msg) != nil {
		msg = string(e) // a number, a list: its JSON is the message
	}
	obj := struct {
		Message string `json:"message"`
		Type    string `json:"type,omitempty"`
	}{Message: msg}
	_ = json.Unmarshal(top["error_type"], &obj.Type)
	out, err := json.Marshal(map[string]any{"error": obj})
	if err != nil {
		return body
	}
	return out
}

type readCloser struct {
	io.Reader
	io.Closer
}
