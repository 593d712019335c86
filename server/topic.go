package server

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxTopicLength is the longest topic name /ws and /publish accept, in
// bytes.
const MaxTopicLength = 128

var errTopicEmpty = errors.New("topic is empty")

// validTopic checks a topic name: 1 to MaxTopicLength bytes of ASCII
// letters, digits and "_-.:/@". The set leaves out everything JSON, URLs,
// NATS subjects or shells would treat specially ("*", ">", spaces, quotes),
// so a valid topic can be quoted into JSON and logged as it is.
func validTopic(t string) error {
	if t == "" {
		return errTopicEmpty
	}
	if len(t) > MaxTopicLength {
		return fmt.Errorf("topic is %d bytes long, the limit is %d", len(t), MaxTopicLength)
	}
	for i := 0; i < len(t); i++ {
		if !topicByte(t[i]) {
			return fmt.Errorf("topic has the character %s at byte %d; allowed are letters, digits and _-.:/@", quoteCharAt(t, i), i)
		}
	}
	return nil
}

// quoteCharAt quotes the character that starts at byte i of s: the whole
// UTF-8 sequence ('é'), or the byte ('\xc3') where s is not UTF-8 there.
func quoteCharAt(s string, i int) string {
	r, n := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && n <= 1 {
		return fmt.Sprintf("'\\x%02x'", s[i])
	}
	return strconv.QuoteRune(r)
}

// validPattern checks a topic pattern of a token, --history or
// --presence: a topic in which "*" stands for any run of characters. A
// pattern with any other character a topic cannot have could never match.
func validPattern(p string) error {
	if p == "" {
		return errors.New("a pattern is empty")
	}
	for i := 0; i < len(p); i++ {
		if p[i] != '*' && !topicByte(p[i]) {
			return fmt.Errorf("pattern %q can never match: it has the character %s at byte %d; topics have letters, digits and _-.:/@", p, quoteCharAt(p, i), i)
		}
	}
	if n := len(p) - strings.Count(p, "*"); n > MaxTopicLength {
		return fmt.Errorf("pattern %q can never match: topics are %d bytes at most", p, MaxTopicLength)
	}
	return nil
}

func topicByte(b byte) bool {
	switch {
	case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		return true
	}
	switch b {
	case '_', '-', '.', ':', '/', '@':
		return true
	}
	return false
}

// matchTopic reports whether topic matches pattern, in which "*" stands
// for any run of characters (none included) and every other character for
// itself: "chat.*" matches "chat.lobby" and "chat.", "*" matches every
// topic, "news" matches "news" only.
func matchTopic(pattern, topic string) bool {
	// Greedy match with one backtrack point: the last star seen.
	p, t := 0, 0
	star, mark := -1, 0
	for t < len(topic) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, t
			p++
		case p < len(pattern) && pattern[p] == topic[t]:
			p++
			t++
		case star >= 0:
			mark++
			p, t = star+1, mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// matchAny reports whether topic matches one of patterns.
func matchAny(patterns []string, topic string) bool {
	for _, p := range patterns {
		if matchTopic(p, topic) {
			return true
		}
	}
	return false
}
