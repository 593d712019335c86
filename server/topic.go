package server

import (
	"errors"
	"fmt"
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
			return fmt.Errorf("topic has the character %q at byte %d; allowed are letters, digits and _-.:/@", t[i], i)
		}
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
