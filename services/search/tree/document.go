// Package tree loads a knowledge base from a folder of markdown files: front matter,
// folder summaries, archived stubs, and the path rules that keep every read inside it.
package tree

import "time"

// Maturity is a document's lifecycle stage.
type Maturity int

// Maturity stages, in promotion order.
const (
	Draft Maturity = iota
	Validated
	Core
)

// String returns the front-matter spelling of m.
func (m Maturity) String() string {
	switch m {
	case Validated:
		return "validated"
	case Core:
		return "core"
	default:
		return "draft"
	}
}

// Document is one markdown file of a knowledge base.
type Document struct {
	// Path is relative to the tree root, with forward slashes ("auth/jwt/rotation.md").
	Path string
	// Title comes from front matter, else the first "# " heading, else the file name.
	Title string
	// Content is the markdown body without front matter.
	Content string
	Tags    []string
	// Related holds paths of related documents, cleaned and relative to the root.
	Related []string
	// Importance is the front-matter starting value in [0,100] (default 50).
	Importance float64
	// Maturity is the front-matter starting value (default Draft).
	Maturity Maturity
	// Updated is the front-matter "updated" time, else the file's modification time.
	Updated time.Time
	// Archived marks an _archived/*.stub.md ghost cue.
	Archived bool
	// Summary marks a folder summary (_index.md).
	Summary bool
	// Extra holds front-matter keys Quarry does not interpret, as decoded from YAML.
	Extra map[string]any
	// Hash is the hex SHA-256 of the file's bytes as read ("" for documents built in
	// memory): a write of the same bytes is no change.
	Hash string
}

// Folder returns the folder that holds the document ("" for the root).
func (d *Document) Folder() string {
	for i := len(d.Path) - 1; i >= 0; i-- {
		if d.Path[i] == '/' {
			return d.Path[:i]
		}
	}
	return ""
}
