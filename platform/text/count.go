package text

import "strconv"

// Count writes n and the noun for that many things: "1 result", "0 results",
// "2 entries". Messages, explain stages and tool results a model reads all count
// things; "1 results" reads as a slip to either.
func Count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
