package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// ErrInvalidArguments means a tool call's arguments do not match the tool's schema:
// not a JSON object, a missing or unknown property, a wrong type or a value out of
// range. The model gets the message and may call again.
var ErrInvalidArguments = errors.New("invalid tool arguments")

// kind is the JSON type of a parameter.
type kind string

const (
	kindString  kind = "string"
	kindInteger kind = "integer"
)

// param describes one property of a tool's arguments; the same description is the
// JSON schema the model sees and the rules the arguments are checked against.
type param struct {
	name     string
	kind     kind
	desc     string
	required bool
	maxLen   int // strings: longest value in bytes
	min, max int // integers: inclusive range
	// same, for strings, spells values that ask for the same thing alike (see
	// Set.Key); nil compares them as written.
	same func(string) string
}

// schema returns the JSON schema of an argument object with params.
func schema(params []param) map[string]any {
	props := map[string]any{}
	required := []string{}
	for _, p := range params {
		prop := map[string]any{"type": string(p.kind), "description": p.desc}
		switch p.kind {
		case kindString:
			if p.maxLen > 0 {
				prop["maxLength"] = p.maxLen
			}
		case kindInteger:
			prop["minimum"] = p.min
			prop["maximum"] = p.max
		}
		props[p.name] = prop
		if p.required {
			required = append(required, p.name)
		}
	}
	return map[string]any{
		"type":                 "object",
		"properties":           props,
		"required":             required,
		"additionalProperties": false,
	}
}

// args are validated tool arguments.
type args struct {
	strs map[string]string
	ints map[string]int
}

func (a args) str(name string) string { return a.strs[name] }

func (a args) integer(name string, def int) int {
	if v, ok := a.ints[name]; ok {
		return v
	}
	return def
}

// parseArgs checks raw, the arguments a model sent, against params. Models send
// arguments as a JSON string they wrote themselves, so everything is checked: the
// text must be one JSON object, every property must be known and of its type, and
// required ones present. An empty string counts as {} (some servers send "" for a call
// without arguments). Integers written as strings ("5") are accepted: small models
// do that, and the value is still range-checked.
func parseArgs(raw string, params []param) (args, error) {
	a := args{strs: map[string]string{}, ints: map[string]int{}}
	raw = strings.TrimSpace(raw)
	if raw == "" {
		raw = "{}"
	}
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	var obj map[string]json.RawMessage
	if err := dec.Decode(&obj); err != nil {
		return a, fmt.Errorf("%w: not a JSON object: %v", ErrInvalidArguments, err)
	}
	if dec.More() {
		return a, fmt.Errorf("%w: text after the JSON object", ErrInvalidArguments)
	}
	if obj == nil {
		return a, fmt.Errorf("%w: want a JSON object, got null", ErrInvalidArguments)
	}
	for name := range obj {
		if !slices.ContainsFunc(params, func(p param) bool { return p.name == name }) {
			return a, fmt.Errorf("%w: unknown property %q (allowed: %s)", ErrInvalidArguments, name, names(params))
		}
	}
	for _, p := range params {
		v, ok := obj[p.name]
		if !ok || bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			if p.required {
				return a, fmt.Errorf("%w: %q is required", ErrInvalidArguments, p.name)
			}
			continue
		}
		switch p.kind {
		case kindString:
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return a, fmt.Errorf("%w: %q must be a string", ErrInvalidArguments, p.name)
			}
			if p.maxLen > 0 && len(s) > p.maxLen {
				return a, fmt.Errorf("%w: %q is longer than %d bytes", ErrInvalidArguments, p.name, p.maxLen)
			}
			if p.required && strings.TrimSpace(s) == "" {
				return a, fmt.Errorf("%w: %q must not be empty", ErrInvalidArguments, p.name)
			}
			a.strs[p.name] = s
		case kindInteger:
			n, err := integer(v)
			if err != nil {
				return a, fmt.Errorf("%w: %q must be an integer", ErrInvalidArguments, p.name)
			}
			if n < p.min || n > p.max {
				return a, fmt.Errorf("%w: %q must be in [%d,%d], got %d", ErrInvalidArguments, p.name, p.min, p.max, n)
			}
			a.ints[p.name] = n
		}
	}
	return a, nil
}

// integer reads a JSON number with no fractional part, or a string holding one.
func integer(v json.RawMessage) (int, error) {
	var s string
	if json.Unmarshal(v, &s) == nil {
		v = json.RawMessage(strings.TrimSpace(s))
	}
	var f float64
	if err := json.Unmarshal(v, &f); err != nil {
		return 0, err
	}
	if f != math.Trunc(f) || math.Abs(f) > 1e9 {
		return 0, errors.New("not an integer")
	}
	return int(f), nil
}

func names(params []param) string {
	var out []string
	for _, p := range params {
		out = append(out, strconv.Quote(p.name))
	}
	return strings.Join(out, ", ")
}

// Canonical returns a tool call's arguments in one spelling, so that calls that differ
// only in white space or key order count as the same call: compact JSON with sorted
// keys, or the trimmed text when it is not JSON.
func Canonical(raw string) string {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return "{}"
	}
	var v any
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil || dec.More() {
		return raw
	}
	b, err := json.Marshal(v)
	if err != nil {
		return raw
	}
	return string(b)
}
