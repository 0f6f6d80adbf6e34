package kv

import (
	"errors"
	"flag"
	"fmt"
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
	c, err = parse("--kv-memory", "1MiB", "--kv-scrub", "poison", "--kv-verify", "sample", "--kv-page-size", "32", "--kv-type", "f32")
	if err != nil || c.Pages != (1<<20)/40960 || c.Scrub != ScrubPoison || c.Verify != VerifySample || c.Type != F32 {
		t.Fatalf("%+v %v", c, err)
	}
	for _, args := range [][]string{
		{},
		{"--kv-pool-tokens", "16", "--kv-memory", "1GiB"},
		{"--kv-memory", "100"},
		{"--kv-pool-tokens", "16", "--kv-scrub", "maybe"},
		{"--kv-pool-tokens", "16", "--kv-verify", "never"},
		{"--kv-pool-tokens", "16", "--kv-type", "q4_0"},
	} {
		_, err := parse(args...)
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeBadConfig {
			t.Errorf("%v: %v, want %s", args, err, CodeBadConfig)
		}
	}
}

// TestF16DoublesCapacityPerByte: the same --kv-memory budget holds twice
// the tokens with F16 pages (the default) as with F32 pages, and the page
// sizes are 2 and 4 bytes per element of layers x KV dim x K,V x slots
// (counted here, not taken from the code under test).
func TestF16DoublesCapacityPerByte(t *testing.T) {
	const layers, kvDim, ps = 5, 32, 16
	elems := layers * kvDim * 2 * ps
	budget := fmt.Sprint(8 * 4 * elems) // exactly 8 F32 pages
	for _, c := range []struct {
		args  []string
		typ   Type
		bytes int
	}{
		{nil, F16, 2 * elems}, // the default
		{[]string{"--kv-type", "f16"}, F16, 2 * elems},
		{[]string{"--kv-type", "f32"}, F32, 4 * elems},
		{[]string{"--kv-type", "q8_0"}, Q8_0, elems / 32 * 34},
		{[]string{"--kv-type", "q8"}, Q8_0, elems / 32 * 34},
	} {
		var f Flags
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		f.Register(fs)
		if err := fs.Parse(append([]string{"--kv-memory", budget}, c.args...)); err != nil {
			t.Fatal(err)
		}
		cfg, err := f.Config(layers, kvDim)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Type != c.typ || cfg.PageBytes() != c.bytes {
			t.Fatalf("%v: type %v, %d-byte pages; want %v, %d", c.args, cfg.Type, cfg.PageBytes(), c.typ, c.bytes)
		}
		p, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		// 8 F32 pages' tokens, twice that in F16, whole Q8_0 pages in
		// 8*4*elems bytes (Q8_0: 3.76x F32's tokens, rounded down to pages).
		want := 8 * 4 * elems / c.bytes * ps
		if p.CapacityTokens() != want {
			t.Errorf("%v: %d tokens in %s bytes, want %d", c.args, p.CapacityTokens(), budget, want)
		}
		p.Close()
	}
}
