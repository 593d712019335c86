// Package cli holds the command-line conventions every rally subcommand
// follows, on top of the standard flag package:
//
//   - flags are shown and reported as --name (single letters as -x); the
//     flag package accepts either spelling on the command line;
//   - flags may come before, between or after the arguments; "--" ends
//     the flags;
//   - -h, --help and -help print the command's help on standard output
//     and exit 0;
//   - a usage error (unknown flag, bad value, wrong arguments) is one line
//     on standard error, "rally CMD: what is wrong (see rally CMD --help)",
//     and exit status 2.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
)

// ErrHelp is returned by Parse when help was asked for.
var ErrHelp = flag.ErrHelp

// UsageError is a command line the command cannot run: exit status 2.
type UsageError struct{ msg string }

func (e *UsageError) Error() string { return e.msg }

// Usagef returns a UsageError.
func Usagef(format string, a ...any) error {
	return &UsageError{fmt.Sprintf(format, a...)}
}

// NewFlagSet returns an empty flag set that reports nothing itself:
// Parse returns its errors, in the convention's words.
func NewFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// Parse parses args with flags anywhere and returns the other arguments.
// Its error is ErrHelp or a *UsageError.
func Parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var after []string
	if i := slices.Index(args, "--"); i >= 0 {
		args, after = args[:i], args[i+1:]
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, ErrHelp
			}
			return nil, &UsageError{Reword(err.Error())}
		}
		args = fs.Args()
		if len(args) == 0 {
			return append(pos, after...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// Dash is how a flag is written: -x for one letter, --name otherwise.
func Dash(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

var (
	unknownFlag = regexp.MustCompile(`^flag provided but not defined: -(.*)$`)
	needsValue  = regexp.MustCompile(`^flag needs an argument: -(.*)$`)
	badValue    = regexp.MustCompile(`^invalid (?:boolean )?value (".*") for (?:flag )?-([^:]+): (.*)$`)
)

// Reword turns an error of the flag package into the convention's words.
func Reword(msg string) string {
	if m := unknownFlag.FindStringSubmatch(msg); m != nil {
		return "unknown flag " + Dash(m[1])
	}
	if m := needsValue.FindStringSubmatch(msg); m != nil {
		return Dash(m[1]) + " needs a value"
	}
	if m := badValue.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("invalid value %s for %s: %s", m[1], Dash(m[2]), m[3])
	}
	return msg
}

// Exit reports err, the outcome of parsing the command line of cmd (such
// as "rally serve"), and returns the exit status: ErrHelp prints help on
// stdout (0), any other error is one line on stderr (2). A nil err
// returns -1: go on.
func Exit(cmd string, err error, stdout, stderr io.Writer, help func(io.Writer)) int {
	switch {
	case err == nil:
		return -1
	case errors.Is(err, ErrHelp):
		help(stdout)
		return 0
	}
	fmt.Fprintf(stderr, "%s: %v (see %s --help)\n", cmd, err, cmd)
	return 2
}

// PrintFlags prints the flags of fs, in the order of names (all, sorted,
// when names is empty): each as "  --name VALUE", its usage indented
// below, and its default when it has one.
func PrintFlags(w io.Writer, fs *flag.FlagSet, names ...string) {
	if len(names) == 0 {
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	}
	for _, n := range names {
		f := fs.Lookup(n)
		if f == nil {
			continue
		}
		PrintFlag(w, f, "", "")
	}
}

// PrintFlag prints one flag as PrintFlags does, its value shown as value
// ("": as the usage names it), with note (such as the environment
// variable that sets it) added to its default line.
func PrintFlag(w io.Writer, f *flag.Flag, value, note string) {
	name, usage := flag.UnquoteUsage(f)
	if _, isSize := f.Value.(interface{ isBytes() }); isSize && name == "value" {
		name = "bytes"
	}
	if value == "" {
		value = placeholder(name)
	}
	if _, isBool := f.Value.(interface{ IsBoolFlag() bool }); isBool {
		value = ""
	}
	head := "  " + Dash(f.Name)
	if value != "" {
		head += " " + value
	}
	fmt.Fprintln(w, head)
	for _, line := range strings.Split(usage, "\n") {
		fmt.Fprintf(w, "        %s\n", line)
	}
	var tail []string
	if note != "" {
		tail = append(tail, note)
	}
	if d := f.DefValue; d != "" && d != "false" && d != "0" && d != "0s" && d != "[]" {
		tail = append(tail, "default "+d)
	}
	if len(tail) > 0 {
		fmt.Fprintf(w, "        (%s)\n", strings.Join(tail, "; "))
	}
}

// placeholder is how a flag's value is shown when its usage does not name
// it (with `NAME` in back quotes): by its kind, in capitals.
func placeholder(kind string) string {
	switch kind {
	case "int", "uint", "int64", "uint64":
		return "N"
	case "float":
		return "NUMBER"
	case "value":
		return "VALUE"
	}
	return strings.ToUpper(kind)
}
