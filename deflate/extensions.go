package deflate

import (
	"errors"
	"strconv"
	"strings"
)

// The Sec-WebSocket-Extensions header (RFC 6455 9.1), on the HTTP list
// rules of RFC 9110 5.6:
//
//	Sec-WebSocket-Extensions = 1#extension
//	extension = token *( OWS ";" OWS extension-param )
//	extension-param = token [ BWS "=" BWS ( token / quoted-string ) ]
//
// A quoted value must unescape to a token (RFC 6455 9.1). Empty list
// elements are skipped (RFC 9110 5.6.1), and several header lines are one
// list. Names are compared as written: the registry spells them in lower
// case, and so do browsers and npm ws.

// extension is one element of the list: a name and its parameters, in order.
type extension struct {
	name   string
	params []param
}

// param is one extension parameter. hasValue tells "a" from "a=".
type param struct {
	name, value string
	hasValue    bool
}

// errMalformed is the cause of every parse error; the message names the
// position so that a rejected header can be diagnosed from a log.
var errMalformed = errors.New("malformed Sec-WebSocket-Extensions header")

type syntaxError struct {
	msg string
	pos int
	in  string
}

func (e *syntaxError) Error() string {
	in := e.in
	if len(in) > 64 {
		in = in[:64] + "..."
	}
	return "deflate: " + errMalformed.Error() + ": " + e.msg + " at byte " + strconv.Itoa(e.pos) + " of " + strconv.Quote(in)
}

func (e *syntaxError) Unwrap() error { return errMalformed }

// parseExtensions parses the values of every Sec-WebSocket-Extensions line
// as one list. Strings in the result share memory with values, except
// quoted values with escapes.
func parseExtensions(values []string) ([]extension, error) {
	var out []extension
	for _, v := range values {
		var err error
		out, err = parseList(out, v)
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func parseList(out []extension, s string) ([]extension, error) {
	p := scanner{s: s}
	for {
		p.skipSpace()
		if p.done() {
			return out, nil
		}
		if p.peek() == ',' { // an empty element
			p.i++
			continue
		}
		name := p.token()
		if name == "" {
			return nil, p.fail("expected an extension name")
		}
		ext := extension{name: name}
		for {
			p.skipSpace()
			if p.done() || p.peek() == ',' {
				break
			}
			if p.peek() != ';' {
				return nil, p.fail("expected ';' or ','")
			}
			p.i++
			p.skipSpace()
			pr := param{name: p.token()}
			if pr.name == "" {
				return nil, p.fail("expected a parameter name")
			}
			p.skipSpace()
			if !p.done() && p.peek() == '=' {
				p.i++
				p.skipSpace()
				pr.hasValue = true
				if !p.done() && p.peek() == '"' {
					v, err := p.quoted()
					if err != nil {
						return nil, err
					}
					pr.value = v
				} else {
					pr.value = p.token()
					if pr.value == "" {
						return nil, p.fail("expected a parameter value")
					}
				}
			}
			ext.params = append(ext.params, pr)
		}
		out = append(out, ext)
		if !p.done() {
			p.i++ // the ','
		}
	}
}

type scanner struct {
	s string
	i int
}

func (p *scanner) done() bool { return p.i >= len(p.s) }
func (p *scanner) peek() byte { return p.s[p.i] }

func (p *scanner) fail(msg string) error {
	return &syntaxError{msg: msg, pos: p.i, in: p.s}
}

func (p *scanner) skipSpace() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *scanner) token() string {
	start := p.i
	for p.i < len(p.s) && isTokenChar(p.s[p.i]) {
		p.i++
	}
	return p.s[start:p.i]
}

// quoted reads a quoted-string and returns its unescaped content, which
// must be a token.
func (p *scanner) quoted() (string, error) {
	start := p.i
	p.i++ // the opening quote
	var b []byte
	escaped := false
	for ; p.i < len(p.s); p.i++ {
		c := p.s[p.i]
		switch {
		case c == '"':
			v := p.s[start+1 : p.i]
			if escaped {
				v = string(b)
			}
			p.i++
			if !isToken(v) {
				return "", &syntaxError{msg: "quoted value is not a token", pos: start, in: p.s}
			}
			return v, nil
		case c == '\\':
			if !escaped {
				escaped = true
				b = append(b, p.s[start+1:p.i]...)
			}
			p.i++
			if p.i == len(p.s) {
				return "", p.fail("backslash at the end")
			}
			c = p.s[p.i]
			if !isQuotedPairChar(c) {
				return "", p.fail("invalid escaped character")
			}
			b = append(b, c)
		case isQuotedChar(c):
			if escaped {
				b = append(b, c)
			}
		default:
			return "", p.fail("invalid character in quoted value")
		}
	}
	return "", &syntaxError{msg: "unterminated quoted value", pos: start, in: p.s}
}

// tokenChars marks the tchar of RFC 9110 5.6.2.
var tokenChars = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

func isTokenChar(c byte) bool { return tokenChars[c] }

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !tokenChars[s[i]] {
			return false
		}
	}
	return true
}

// isQuotedChar is qdtext: HTAB, SP, VCHAR but '"' and '\', and obs-text.
func isQuotedChar(c byte) bool {
	return c == '\t' || c == ' ' || c == 0x21 || (c >= 0x23 && c <= 0x5B) || (c >= 0x5D && c <= 0x7E) || c >= 0x80
}

// isQuotedPairChar is what may follow '\': HTAB, SP, VCHAR, obs-text.
func isQuotedPairChar(c byte) bool {
	return c == '\t' || c == ' ' || (c >= 0x21 && c <= 0x7E) || c >= 0x80
}

// String formats the extension as one list element, the way it is sent:
// "name; a; b=1". Values are tokens, so they are never quoted.
func (e extension) String() string {
	var b strings.Builder
	b.WriteString(e.name)
	for _, p := range e.params {
		b.WriteString("; ")
		b.WriteString(p.name)
		if p.hasValue {
			b.WriteByte('=')
			b.WriteString(p.value)
		}
	}
	return b.String()
}
