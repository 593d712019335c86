package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// userURL is the /ws URL of s with a token for user that grants every
// topic.
func userURL(t *testing.T, s *testServer, user string) string {
	t.Helper()
	tok, err := SignToken([]byte(testSecret), Claims{Subscribe: []string{"*"}, Publish: []string{"*"},
		RegisteredClaims: jwt.RegisteredClaims{Subject: user, ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}})
	if err != nil {
		t.Fatal(err)
	}
	return s.ws + "/ws?token=" + tok
}

// join subscribes c to topic and returns its client id from the ack.
func (c *client) join(topic string) string {
	c.t.Helper()
	ack := c.subscribeAt(topic, nil)
	if ack.Client == "" {
		c.t.Fatalf("subscribe ack on a presence topic without a client id: %+v", ack)
	}
	return ack.Client
}

// event reads the next frame, which must be a join or leave event.
func (c *client) event(typ, topic, client, user string) {
	c.t.Helper()
	f := c.frame()
	if f.Type != typ || f.Topic != topic || f.Client != client || f.User != user {
		c.t.Fatalf("got %+v, want %s of %s (%s) on %s", f, typ, client, user, topic)
	}
}

// presenceOf asks for the members of topic.
func (c *client) presenceOf(topic string) frame {
	c.t.Helper()
	c.send(fmt.Sprintf(`{"type":"presence","topic":%q,"id":"p"}`, topic))
	f := c.frame()
	if f.Type != "presence" || string(f.ID) != `"p"` || f.Topic != topic {
		c.t.Fatalf("presence of %s: %+v", topic, f)
	}
	if f.Count != len(f.Members) {
		c.t.Fatalf("presence of %s: count %d but %d members", topic, f.Count, len(f.Members))
	}
	return f
}

func hasMembers(f frame, want map[string]string) bool {
	if len(f.Members) != len(want) {
		return false
	}
	for _, m := range f.Members {
		if want[m.Client] != m.User {
			return false
		}
	}
	return true
}

func presenceConfig() Config {
	return Config{TokenSecret: testSecret, Presence: PresenceConfig{Topics: []string{"p.*"}, TTL: 600 * time.Millisecond}}
}

func TestPresenceOnOneNode(t *testing.T) {
	s := serve(t, presenceConfig())
	alice := dial(t, userURL(t, s, "alice"), nil)
	a := alice.join("p.room")
	bob := dial(t, userURL(t, s, "bob"), nil)
	b := bob.join("p.room")
	alice.event("join", "p.room", b, "bob")
	if f := bob.presenceOf("p.room"); !hasMembers(f, map[string]string{a: "alice", b: "bob"}) || f.Users != 2 {
		t.Fatalf("members: %+v", f)
	}
	// A second connection of alice's: three members, two users.
	alice2 := dial(t, userURL(t, s, "alice"), nil)
	a2 := alice2.join("p.room")
	alice.event("join", "p.room", a2, "alice")
	bob.event("join", "p.room", a2, "alice")
	if f := alice.presenceOf("p.room"); f.Count != 3 || f.Users != 2 {
		t.Fatalf("with two connections of alice: %+v", f)
	}
	alice2.c.CloseNow()
	alice.event("leave", "p.room", a2, "alice")
	bob.event("leave", "p.room", a2, "alice")
	bob.send(`{"type":"unsubscribe","topic":"p.room"}`)
	alice.event("leave", "p.room", b, "bob")
	bob.send(`{"type":"presence","topic":"plain","id":1}`)
	if f := bob.frame(); f.Type != "error" || f.Code != "no_presence" {
		t.Fatalf("presence of a topic without it: %+v", f)
	}
	carol := dial(t, userURL(t, s, "carol"), nil)
	c := carol.join("p.room")
	alice.event("join", "p.room", c, "carol")
	carol.c.CloseNow()
	alice.event("leave", "p.room", c, "carol")
	if f := alice.presenceOf("p.room"); !hasMembers(f, map[string]string{a: "alice"}) {
		t.Fatalf("members: %+v", f.Members)
	}
}

func TestPresenceAcrossTwoNodes(t *testing.T) {
	cfg := presenceConfig()
	cfg.Node = "a"
	cfg.NATS = NATSConfig{Embedded: "127.0.0.1:0"}
	na := serve(t, cfg)
	cfg = presenceConfig()
	cfg.Node = "b"
	cfg.NATS = NATSConfig{URL: na.embeddedNATS.ClientURL()}
	nb := serve(t, cfg)

	alice := dial(t, userURL(t, na, "alice"), nil)
	a := alice.join("p.room")
	bob := dial(t, userURL(t, nb, "bob"), nil)
	b := bob.join("p.room")
	// Node A learns of bob through NATS.
	alice.event("join", "p.room", b, "bob")
	both := map[string]string{a: "alice", b: "bob"}
	if f := alice.presenceOf("p.room"); !hasMembers(f, both) {
		t.Fatalf("members on A: %+v", f.Members)
	}
	// Node B learned of alice before or after bob joined (then bob is
	// told of her join); ask until it has (each answer is a round trip,
	// no sleep).
	for i := 0; ; i++ {
		bob.send(`{"type":"presence","topic":"p.room","id":"p"}`)
		f := bob.frame()
		if f.Type == "join" && f.Client == a && f.User == "alice" {
			f = bob.frame()
		}
		if f.Type != "presence" {
			t.Fatalf("presence on B: %+v", f)
		}
		if hasMembers(f, both) {
			break
		}
		if i == 10000 {
			t.Fatalf("members on B: %+v", f.Members)
		}
	}
	bob.c.CloseNow()
	alice.event("leave", "p.room", b, "bob")

	// A node that stops announcing (as a dead one does) loses its
	// members on the other nodes after the TTL.
	carol := dial(t, userURL(t, nb, "carol"), nil)
	c := carol.join("p.room")
	alice.event("join", "p.room", c, "carol")
	nb.presence.mute()
	alice.event("leave", "p.room", c, "carol")
	if f := alice.presenceOf("p.room"); !hasMembers(f, map[string]string{a: "alice"}) {
		t.Fatalf("members on A after B died: %+v", f.Members)
	}
}
