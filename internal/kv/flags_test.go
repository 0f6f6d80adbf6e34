package kv

import (
	"errors"
	"flag"
	"testing"
)

func TestFlags(t *testing.T) {
	parse := func(args ...string) (Config, error) {
		var f Flags
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		f.Register(fs)
		if err := fs.Parse(args); err != nil {
			return Config{}, err
		}
		return f.Config(5, 32) // stories260K: 20480-byte pages
	}
	c, err := parse("--kv-pool-tokens", "1000")
	if err != nil || c.Pages != 63 || c.PageSize != 16 || c.Scrub != ScrubZero {
		t.Fatalf("%+v %v", c, err)
	}
	c, err = parse("--kv-memory", "1MiB", "--kv-scrub", "poison", "--kv-verify", "sample", "--kv-page-size", "32")
	if err != nil || c.Pages != (1<<20)/40960 || c.Scrub != ScrubPoison || c.Verify != VerifySample {
		t.Fatalf("%+v %v", c, err)
	}
	for _, args := range [][]string{
		{},
		{"--kv-pool-tokens", "16", "--kv-memory", "1GiB"},
		{"--kv-memory", "100"},
		{"--kv-pool-tokens", "16", "--kv-scrub", "maybe"},
		{"--kv-pool-tokens", "16", "--kv-verify", "never"},
	} {
		_, err := parse(args...)
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeBadConfig {
			t.Errorf("%v: %v, want %s", args, err, CodeBadConfig)
		}
	}
}
