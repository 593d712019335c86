module github.com/rallyws/rally

go 1.26

require (
	github.com/chromedp/cdproto v0.160.1
	github.com/chromedp/chromedp v0.23.1
	github.com/klauspost/compress v1.20.4
)

require github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
