module github.com/rallyws/rally

go 1.26
