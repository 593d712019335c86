package deflate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"testing"
	"time"
)

// nodeZlib runs jobs through Node's zlib, the library behind npm ws and
// the browsers' own permessage-deflate: "inflate" jobs inflate payloads
// (the tail put back, a Z_SYNC_FLUSH per message), "deflate" jobs compress
// messages and take the tail off, as ws does. With takeover one zlib
// stream carries all the messages of a job; without, each has its own.
const nodeZlib = `
const zlib = require('zlib');
const TAIL = Buffer.from([0, 0, 0xff, 0xff]);
function step(stream, data, mode) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    const onData = (c) => chunks.push(c);
    const onError = (e) => { done(); reject(e); };
    const done = () => { stream.off('data', onData); stream.off('error', onError); };
    stream.on('data', onData);
    stream.on('error', onError);
    stream.write(data);
    stream.flush(zlib.constants.Z_SYNC_FLUSH, () => {
      done();
      let b = Buffer.concat(chunks);
      if (mode === 'deflate') {
        if (b.length < 4 || !b.subarray(b.length - 4).equals(TAIL)) return reject(new Error('flush without the tail'));
        b = b.subarray(0, b.length - 4);
      }
      resolve(b);
    });
  });
}
async function run(job) {
  const out = [];
  let stream = null;
  for (const m of job.msgs.map((s) => Buffer.from(s ?? '', 'base64'))) {
    if (!stream || !job.takeover) {
      if (stream) stream.close();
      stream = job.mode === 'inflate'
        ? zlib.createInflateRaw({ windowBits: job.bits })
        : zlib.createDeflateRaw({ windowBits: job.bits, memLevel: 8 });
    }
    const data = job.mode === 'inflate' ? Buffer.concat([m, TAIL]) : m;
    out.push((await step(stream, data, job.mode)).toString('base64'));
  }
  if (stream) stream.close();
  return out;
}
let input = '';
process.stdin.on('data', (d) => (input += d));
process.stdin.on('end', async () => {
  const results = [];
  for (const job of JSON.parse(input)) {
    try { results.push({ out: await run(job) }); } catch (e) { results.push({ error: String(e) }); }
  }
  process.stdout.write(JSON.stringify(results));
});
`

type nodeJob struct {
	Mode     string   `json:"mode"`
	Bits     int      `json:"bits"`
	Takeover bool     `json:"takeover"`
	Msgs     [][]byte `json:"msgs"`
}

type nodeResult struct {
	Out   [][]byte `json:"out"`
	Error string   `json:"error"`
}

func runNode(t *testing.T, jobs []nodeJob) []nodeResult {
	t.Helper()
	if testing.Short() {
		t.Skip("needs node; runs without -short")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not on PATH (interop/setup.sh installs it): %v", err)
	}
	in, err := json.Marshal(jobs)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "-e", nodeZlib)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, stderr.Bytes())
	}
	var res []nodeResult
	if err := json.Unmarshal(out, &res); err != nil || len(res) != len(jobs) {
		t.Fatalf("node answered %q: %v", out, err)
	}
	return res
}

// interopMessages mixes text, JSON-like and random data, with repeats at
// distances that reach the edge of every window size.
func interopMessages() [][]byte {
	r := rand.New(rand.NewPCG(3, 4))
	rnd := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	var msgs [][]byte
	for i := range 24 {
		switch i % 6 {
		case 0:
			msgs = append(msgs, sample(uint64(i), 2000))
		case 1:
			b := rnd(250) // repeats 250 bytes back: within every window
			msgs = append(msgs, append(append(b, b...), b...))
		case 2:
			msgs = append(msgs, nil)
		case 3:
			b := rnd(1000)
			msgs = append(msgs, append(b, b...))
		case 4:
			msgs = append(msgs, sample(uint64(i), 40000))
		case 5:
			b := rnd(20000)
			msgs = append(msgs, append(b, b...))
		}
	}
	return msgs
}

var interopBits = []int{8, 9, 10, 12, 15}

func TestNodeZlibInflatesWhatWeCompressWithinTheNegotiatedWindow(t *testing.T) {
	msgs := interopMessages()
	var jobs []nodeJob
	for _, bits := range interopBits {
		for _, takeover := range []bool{false, true} {
			c := NewCompressor(0, bits, takeover)
			job := nodeJob{Mode: "inflate", Bits: bits, Takeover: takeover}
			for i, m := range msgs {
				job.Msgs = append(job.Msgs, c.Compress(nil, m))
				if i%7 == 6 {
					c.Idle()
				}
			}
			jobs = append(jobs, job)
		}
	}
	// zlib's inflate keeps a window of exactly 2^bits bytes and fails a
	// match beyond it ("invalid distance too far back").
	for i, res := range runNode(t, jobs) {
		job := jobs[i]
		if res.Error != "" {
			t.Errorf("bits %d, takeover %t: zlib failed: %s", job.Bits, job.Takeover, res.Error)
			continue
		}
		for k, got := range res.Out {
			if !bytes.Equal(got, msgs[k]) {
				t.Errorf("bits %d, takeover %t, message %d: zlib inflated %d bytes, want %d", job.Bits, job.Takeover, k, len(got), len(msgs[k]))
			}
		}
	}
}

func TestWeInflateWhatNodeZlibCompresses(t *testing.T) {
	msgs := interopMessages()
	var jobs []nodeJob
	for _, bits := range interopBits {
		for _, takeover := range []bool{false, true} {
			jobs = append(jobs, nodeJob{Mode: "deflate", Bits: bits, Takeover: takeover, Msgs: msgs})
		}
	}
	for i, res := range runNode(t, jobs) {
		job := jobs[i]
		name := fmt.Sprintf("bits %d, takeover %t", job.Bits, job.Takeover)
		if res.Error != "" {
			t.Errorf("%s: zlib failed: %s", name, res.Error)
			continue
		}
		d := NewDecompressor(job.Bits, job.Takeover)
		for k, wire := range res.Out {
			got, err := d.Inflate(nil, wire, 1<<20)
			if err != nil || !bytes.Equal(got, msgs[k]) {
				t.Errorf("%s, message %d: inflated %d bytes, %v; want %d", name, k, len(got), err, len(msgs[k]))
			}
			if k%5 == 4 {
				d.Idle() // from here on only the kept window carries history
			}
		}
		// What zlib promised: no match beyond the window. For 8 bits zlib
		// compresses with 9, but keeps its matches within 2^9-262 bytes.
		var dist int
		var err error
		if job.Takeover {
			_, dist, err = oracleInflate(nil, withTails(res.Out...))
		} else {
			for _, w := range res.Out {
				var d int
				_, d, err = oracleInflate(nil, withTails(w))
				dist = max(dist, d)
				if err != nil {
					break
				}
			}
		}
		if err != nil || dist > 1<<job.Bits {
			t.Errorf("%s: zlib's farthest match is %d bytes back (%v)", name, dist, err)
		}
		t.Logf("%s: zlib's farthest match %d of %d", name, dist, 1<<job.Bits)
	}
}
