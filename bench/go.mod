module github.com/rallyws/rally/bench

go 1.26.0

replace github.com/rallyws/rally => ../

require (
	github.com/coder/websocket v1.8.15
	github.com/gobwas/ws v1.5.0
	github.com/gorilla/websocket v1.5.3
	github.com/lesismal/nbio v1.6.8
	github.com/lxzan/gws v1.8.9
	github.com/rallyws/rally v0.0.0-00010101000000-000000000000
)

require (
	github.com/dolthub/maphash v0.1.0 // indirect
	github.com/gobwas/httphead v0.1.0 // indirect
	github.com/klauspost/compress v1.20.4 // indirect
	github.com/lesismal/llib v1.2.2 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
