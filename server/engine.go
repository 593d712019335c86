package server

import "github.com/rallyws/rally"

// useEngine sets the engine of the WebSocket servers: a goroutine per
// connection (the default), or rally's event loops with Config.EventLoop
// (Linux; elsewhere rally keeps a goroutine per connection), as many as
// Config.EventLoops.
func (s *Server) useEngine(servers ...*rally.Server) {
	for _, ws := range servers {
		ws.EventLoop = s.cfg.EventLoop
		ws.EventLoops = s.cfg.EventLoops
	}
}
