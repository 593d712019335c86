package cli

import (
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// byteUnits are the units ParseBytes knows, lower case: binary ones
// (KiB, and K for short) and decimal ones (KB).
var byteUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tib": 1 << 40,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
}

// NotASize is the one wording of a size every command refuses.
const NotASize = "not a size (a whole number of bytes, optionally with a unit: B, KiB, MiB, GiB, TiB, or KB, MB, GB, TB)"

// ParseBytes reads a size in bytes: a whole number with an optional
// unit, "512MiB", "512 MiB", "64k", "1MB", "1000000". Units are case
// blind; KiB (K), MiB (M), GiB (G), TiB (T) are powers of 1024, KB, MB,
// GB, TB powers of 1000. A sign, a fraction or an unknown unit is
// refused: "VALUE is " + NotASize.
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	unit, ok := byteUnits[strings.ToLower(strings.TrimSpace(t[i:]))]
	if i == 0 || !ok {
		return 0, fmt.Errorf("%q is %s", s, NotASize)
	}
	n, err := strconv.ParseInt(t[:i], 10, 64)
	if err != nil || n > math.MaxInt64/unit {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n * unit, nil
}

// ShowBytes shows n in the largest binary unit that divides it ("64KiB"),
// as a plain number when none does.
func ShowBytes(n int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}

// Bytes is a flag holding a size in bytes (see ParseBytes) between Min
// and Max, stored in an int or an int64. A negative plain number ("-1")
// is read as a number when Min is negative, for flags where a negative
// size means "no limit"; otherwise it is not a size.
type Bytes[T int | int64] struct {
	P        *T
	Min, Max int64
}

// BytesVar defines a size flag on fs that stores in *p, with value as its
// default and no bounds but those of T.
func BytesVar[T int | int64](fs *flag.FlagSet, p *T, name string, value T, usage string) {
	*p = value
	fs.Var(&Bytes[T]{P: p, Min: math.MinInt64, Max: int64(^uint64(0) >> 1)}, name, usage)
}

func (b *Bytes[T]) String() string {
	if b == nil || b.P == nil {
		return ""
	}
	return ShowBytes(int64(*b.P))
}

func (b *Bytes[T]) isBytes() {}

// Get returns the size, as a T.
func (b *Bytes[T]) Get() any { return *b.P }

func (b *Bytes[T]) Set(s string) error {
	var n int64
	var err error
	if t := strings.TrimSpace(s); strings.HasPrefix(t, "-") && b.Min < 0 {
		if n, err = strconv.ParseInt(t, 10, 64); err != nil {
			return fmt.Errorf("%q is %s", s, NotASize)
		}
	} else if n, err = ParseBytes(s); err != nil {
		return err
	}
	if n < b.Min || n > b.Max || int64(T(n)) != n {
		return fmt.Errorf("%s is out of range: want %s to %s", s, ShowBytes(b.Min), ShowBytes(b.Max))
	}
	*b.P = T(n)
	return nil
}
