package server

import (
	"runtime"

	"github.com/rallyws/rally"
)

// useEngine sets the engine of the WebSocket servers: rally's event loops
// with Config.EventLoop (Linux; elsewhere rally keeps a goroutine per
// connection), as many as Config.EventLoops, or a goroutine per
// connection.
func (s *Server) useEngine(servers ...*rally.Server) {
	for _, ws := range servers {
		ws.EventLoop = s.cfg.EventLoop
		ws.EventLoops = s.eventLoops()
	}
}

// eventLoops is how many event loops each endpoint has: Config.EventLoops,
// or by default one per CPU the process may use (GOMAXPROCS), where a
// rally.Server's own default is half as many. A server exposed to
// whoever connects must not let the clients of one loop take what the
// others need: under the randomized adversary of make hostile, on two
// cores, with one loop for /ws the fast subscriber kept 44-72% of its
// rate beside the well-behaved clients (the loop ran most of the time,
// the second core much less), with two loops 105-113%. One loop costs
// less CPU per message when nothing attacks (docs/BENCHMARKS.md, "How
// many event loops"); --event-loops 1 keeps it.
func (s *Server) eventLoops() int {
	if s.cfg.EventLoops > 0 {
		return s.cfg.EventLoops
	}
	return runtime.GOMAXPROCS(0)
}
