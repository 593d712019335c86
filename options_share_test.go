package rally

import (
	"log/slog"
	"reflect"
	"testing"
	"time"
)

// Connections made with equal options share one copy of them; options
// that differ in any field, a callback included, are never merged.
func TestConnectionsShareOptionsOnlyWhenEveryFieldIsEqual(t *testing.T) {
	onPing := func(*Conn, []byte) {}
	base := ConnOptions{OnPing: onPing, ReadLimit: 1 << 10}
	same := base
	if a, b := sharedOptions(&base), sharedOptions(&same); a != b {
		t.Fatal("two connections with equal options got two copies")
	}
	if got := sharedOptions(nil).CloseTimeout; got != DefaultCloseTimeout {
		t.Fatalf("nil options: CloseTimeout %v, want the default %v", got, DefaultCloseTimeout)
	}
	// One value per field, other than base's; a new field of ConnOptions
	// fails here until it is part of optionsKey.
	other := map[string]any{
		"ReadLimit": int64(7), "ReadLimitReason": "too big", "MaxFragments": 3, "PingInterval": time.Second,
		"IdleTimeout": time.Minute, "CloseTimeout": time.Hour,
		"OnPing": func(*Conn, []byte) {}, "OnPong": func(*Conn, []byte) {},
		"Logger": slog.New(slog.DiscardHandler), "BufferLimit": 9,
		"BufferLimitAction": CloseConnection, "BufferLimitCloseCode": uint16(1013), "ControlRate": 7,
		"OnDrain": func(*Conn) {}, "ValidateUTF8OnSend": true,
		"MemoryBudget": &MemoryBudget{}, "WriteStallTimeout": time.Millisecond,
	}
	typ := reflect.TypeFor[ConnOptions]()
	for i := range typ.NumField() {
		name := typ.Field(i).Name
		v, ok := other[name]
		if !ok {
			t.Fatalf("ConnOptions.%s: no test value (and is it in optionsKey?)", name)
		}
		changed := base
		reflect.ValueOf(&changed).Elem().Field(i).Set(reflect.ValueOf(v))
		got := sharedOptions(&changed)
		if got == sharedOptions(&base) {
			t.Errorf("ConnOptions.%s: options differing in it were shared", name)
		}
		if typ.Field(i).Type.Kind() != reflect.Func &&
			!reflect.ValueOf(got).Elem().Field(i).Equal(reflect.ValueOf(&changed).Elem().Field(i)) {
			t.Errorf("ConnOptions.%s: the shared copy has %v", name, reflect.ValueOf(got).Elem().Field(i))
		}
	}
}
