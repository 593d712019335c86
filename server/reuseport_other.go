//go:build !linux

package server

import "errors"

const reusePortSupported = false

func setReusePort(uintptr) error { return errors.New("not supported on this system") }
