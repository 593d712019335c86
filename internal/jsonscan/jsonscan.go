// Package jsonscan finds the bounds of JSON values in a byte slice without
// decoding them: rally serve reads the usual shape of a /ws request this
// way, and rally bench finds a few fields of each delivery. It does not
// validate: whether what lies within the bounds is valid JSON is
// encoding/json's to say (json.Valid), and invalid input gets wrong
// bounds or -1, never a panic.
package jsonscan

// SkipSpace returns the index of the first byte at or after i that is not
// JSON whitespace (RFC 8259 2), or len(p).
func SkipSpace(p []byte, i int) int {
	for i < len(p) && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r') {
		i++
	}
	return i
}

// ValueEnd returns the index just past the JSON value that starts at p[i]
// (a string up to its closing quote, escapes skipped; an object or array
// up to its matching bracket; a number or literal up to the next
// delimiter or whitespace), or -1 if a string, object or array does not
// end. A scalar that is not there (p[i] a delimiter) ends at i.
func ValueEnd(p []byte, i int) int {
	if i >= len(p) {
		return -1
	}
	depth := 0
	for j := i; j < len(p); j++ {
		switch p[j] {
		case '"':
			for j++; j < len(p) && p[j] != '"'; j++ {
				if p[j] == '\\' {
					j++
				}
			}
			if j >= len(p) {
				return -1
			}
			if depth == 0 {
				return j + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return j // a scalar's end, or nothing
			}
			if depth--; depth == 0 {
				return j + 1
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return j
			}
		}
	}
	if depth > 0 {
		return -1
	}
	return len(p)
}
