package natsbroker

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"math"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/rallyws/rally"
)

func TestReceivingBrokerDropsAndCountsMessagesThatAreNotSane(t *testing.T) {
	b := &Broker{}
	r := newRecorder()
	b.att.Store(&attachment{node: "me", r: r})
	sub := &topicSub{b: b, topic: "t", last: map[string]*position{}}
	send := func(typ rally.MessageType, node string, seq uint64, payload string) {
		sub.handle(&nats.Msg{Data: appendMessage(nil, head{typ: typ, node: node, stream: 1, seq: seq}, []byte(payload))})
	}
	send(rally.Text, "a", 1, "ok")
	send(rally.Text, "a", math.MaxUint64, "forged")     // past 2^53
	send(rally.Text, "a", 0, "forged")                  // sequences start at 1
	send(rally.Text, "a", 1+maxSeqJump+1, "forged")     // four billion lost? no
	send(rally.Text, "a", 2, "bad \xff utf-8")          // a browser would close with 1007
	send(rally.Binary, "a", 3, "binary \xff is fine")   // binary is not text
	send(rally.Text, "bad\x00node", 1, "control chars") // reaches logs and metrics
	send(rally.Text, "\xffnode", 1, "invalid name")
	send(rally.Text, "a", 4, "ok again")
	if lost := b.lost.Load(); lost != 0 {
		t.Errorf("lost = %d after forged sequence numbers, want 0", lost)
	}
	if bad, text, got := b.malformed.Load(), b.invalidText.Load(), b.received.Load(); bad != 5 || text != 1 || got != 3 {
		t.Errorf("malformed %d, invalid text %d, received %d; want 5, 1, 3", bad, text, got)
	}
	var got []string
	for _, m := range r.msgs {
		got = append(got, string(m.Payload))
	}
	if len(got) != 3 || got[0] != "ok" || got[1] != "binary \xff is fine" || got[2] != "ok again" {
		t.Errorf("delivered %q", got)
	}
}

func TestEmbeddedServerWithClientAuthRefusesBrokersWithoutIt(t *testing.T) {
	e, err := StartEmbedded("127.0.0.1:0", nil, "", WithClientAuth("", "", "s3cret-token"))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown()
	_, err = New(e.ClientURL(), WithReconnectWait(0))
	if err == nil || !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("broker without the token: %v, want an authorization error", err)
	}
	b, err := New(e.ClientURL(), WithNATSOptions(nats.Token("s3cret-token")))
	if err != nil {
		t.Fatalf("broker with the token: %v", err)
	}
	b.Close()
}

func TestEmbeddedServerRefusesHalfGivenAuth(t *testing.T) {
	for name, opt := range map[string]EmbeddedOption{
		"user without password":  WithClientAuth("u", "", ""),
		"user and token":         WithClientAuth("u", "p", "t"),
		"cluster user only":      WithClusterAuth("u", ""),
		"cluster without a port": WithClusterAuth("u", "p"),
	} {
		if e, err := StartEmbedded("127.0.0.1:0", nil, "", opt); err == nil {
			e.Shutdown()
			t.Errorf("%s: started", name)
		}
	}
}

func TestEmbeddedServersRouteWithClusterAuthAndShareTopics(t *testing.T) {
	auth := WithClusterAuth("route", "r0ute-pass")
	a, err := StartEmbedded("127.0.0.1:0", nil, "127.0.0.1:0", auth)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Shutdown)
	bsrv, err := StartEmbedded("127.0.0.1:0", []string{a.ClusterURL()}, "127.0.0.1:0", auth)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bsrv.Shutdown)
	eventually(t, "the route is up", func() bool { return a.Routes() == 1 && bsrv.Routes() == 1 })
	na := newNode(t, "a", a.ClientURL())
	nb := newNode(t, "b", bsrv.ClientURL())
	sub := dial(t, nb)
	sub.subscribe("room")
	pub := dial(t, na)
	eventually(t, "b's interest reaches a", func() bool { return interest(a, "room") > 0 })
	pub.send("pub room hello")
	if got := sub.read(); got != "hello" {
		t.Fatalf("across the authenticated route: %q", got)
	}
}

func TestBrokerWithAClusterSecretDropsAndCountsUnsignedForgedAndReplayedMessages(t *testing.T) {
	secret := []byte("a cluster secret of 32 bytes....")
	b := &Broker{cfg: config{secret: secret}, inMAC: hmac.New(sha256.New, secret)}
	r := newRecorder()
	b.att.Store(&attachment{node: "me", r: r})
	const subject = "rally.tdA"
	sub := &topicSub{b: b, topic: "t", last: map[string]*position{}}
	message := func(seq uint64, payload string) []byte {
		return appendMessage(nil, head{typ: rally.Text, node: "a", stream: 1, seq: seq}, []byte(payload))
	}
	signed := func(key []byte, subj string, seq uint64, payload string) []byte {
		return sign(hmac.New(sha256.New, key), subj, message(seq, payload))
	}
	for _, data := range [][]byte{
		signed(secret, subject, 1, "ok"),
		message(2, "unsigned"),
		signed([]byte("another secret of 32 bytes......"), subject, 2, "wrong key"),
		signed(secret, "rally.tother", 2, "another topic's"),
		signed(secret, subject, 1, "ok"), // a replay
		signed(secret, subject, 2, "ok again"),
	} {
		sub.handle(&nats.Msg{Subject: subject, Data: data})
	}
	if forged, got := b.forged.Load(), b.received.Load(); forged != 4 || got != 2 {
		t.Errorf("forged %d, received %d; want 4, 2", forged, got)
	}
	if len(r.msgs) != 2 || string(r.msgs[0].Payload) != "ok" || string(r.msgs[1].Payload) != "ok again" {
		t.Errorf("delivered %v", r.msgs)
	}
	if p, err := b.Verify(subject, b.Sign(subject, []byte("presence"))); err != nil || string(p) != "presence" {
		t.Errorf("Verify(Sign) = %q, %v", p, err)
	}
	if _, err := b.Verify(subject, []byte(`{"node":"x"}`)); err == nil {
		t.Error("Verify of an unsigned announcement: nil error")
	}
}
