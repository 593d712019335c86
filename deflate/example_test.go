package deflate_test

import (
	"fmt"

	"github.com/rallyws/rally/deflate"
)

// A browser offers permessage-deflate; the server answers, the browser's
// side checks the answer, and both build their codecs from the same
// parameters. With context takeover, each message is compressed against
// the ones before it.
func Example() {
	offer := deflate.Offer(deflate.ClientConfig{}) // what browsers send
	fmt.Println("offer: ", offer)

	sp, answer, err := deflate.Negotiate([]string{offer}, deflate.ServerConfig{})
	if err != nil {
		panic(err) // a malformed header: answer 400
	}
	fmt.Println("answer:", answer)

	cp, ok, err := deflate.Accept([]string{answer}, deflate.ClientConfig{})
	if err != nil || !ok {
		panic(err)
	}

	// Server to client.
	send := deflate.NewCompressor(deflate.BestSpeed, sp.ServerMaxWindowBits, !sp.ServerNoContextTakeover)
	recv := deflate.NewDecompressor(cp.ServerMaxWindowBits, !cp.ServerNoContextTakeover)
	for _, msg := range []string{
		`{"type":"price","symbol":"ACME","bid":101.25,"ask":101.5,"bidSize":300,"askSize":200}`,
		`{"type":"price","symbol":"ACME","bid":101.25,"ask":101.75,"bidSize":300,"askSize":100}`,
	} {
		payload := send.Compress(nil, []byte(msg)) // sent with RSV1
		got, err := recv.Inflate(nil, payload, 1<<20)
		fmt.Printf("%d bytes sent as %d, inflated: %t %v\n", len(msg), len(payload), string(got) == msg, err)
	}

	// Output:
	// offer:  permessage-deflate; client_max_window_bits
	// answer: permessage-deflate
	// 85 bytes sent as 80, inflated: true <nil>
	// 86 bytes sent as 12, inflated: true <nil>
}

// A message published to many connections is compressed once: every
// connection whose server side keeps no context, with a window of at
// least 15 bits here, gets the same payload.
func ExampleCompressOnce() {
	subscribers := []deflate.Params{
		{ServerNoContextTakeover: true, ServerMaxWindowBits: 15, ClientMaxWindowBits: 15},
		{ServerNoContextTakeover: true, ServerMaxWindowBits: 15, ClientMaxWindowBits: 12},
	}
	payload := deflate.CompressOnce(nil, []byte(`{"topic":"prices","bid":101.25}`), deflate.BestSpeed, 15)
	for _, p := range subscribers {
		recv := deflate.NewDecompressor(p.ServerMaxWindowBits, !p.ServerNoContextTakeover)
		msg, err := recv.Inflate(nil, payload, 1<<20)
		fmt.Println(string(msg), err)
	}
	// Output:
	// {"topic":"prices","bid":101.25} <nil>
	// {"topic":"prices","bid":101.25} <nil>
}
