package loadgen

import "context"

// SetMainContext makes Main run under ctx until restore is called.
func SetMainContext(ctx context.Context) (restore func()) {
	mainContext = func() context.Context { return ctx }
	return func() { mainContext = context.Background }
}
