package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"sluice/internal/gguf"
	"sluice/internal/model"
)

// modelSummary is what model.Load makes of the file: its hyperparameters
// as sluice reads them for the architecture, or why it refuses the file.
func modelSummary(f *gguf.File) (cfg *model.Config, refusal string) {
	m, err := model.Load(f)
	if err != nil {
		return nil, err.Error()
	}
	c := m.Config()
	return &c, ""
}

func init() {
	register(command{name: "inspect", summary: "print a GGUF model's metadata and tensors", run: runInspect})
}

// arrayPreview is how many elements of a long array inspect prints.
const arrayPreview = 8

func runInspect(args []string) int {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	model := fs.String("model", "", "path of the GGUF file to inspect, or hf://ORG/REPO[:QUANT] as sluice serve takes it (required)")
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: sluice inspect --model PATH [--json]

Prints a GGUF file's metadata (long arrays summarized: type, length, first
elements) and its tensors (type, shape in ggml order, bytes), with totals.

Flags:
`)
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *model == "" && fs.NArg() == 1 {
		*model = fs.Arg(0)
	}
	if *model == "" {
		fmt.Fprintln(os.Stderr, "sluice inspect: --model is required")
		fs.Usage()
		return 2
	}
	path, err := localModel(*model)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sluice inspect: %v\n", err)
		return 1
	}
	f, err := gguf.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluice inspect:", err)
		return 1
	}
	defer f.Close()
	if *asJSON {
		err = inspectJSON(os.Stdout, f)
	} else {
		err = inspectText(os.Stdout, f)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluice inspect:", err)
		return 1
	}
	return 0
}

// previewValue returns a JSON-friendly form of v with arrays longer than
// arrayPreview cut to their first elements.
func previewValue(v gguf.Value) any {
	if v.Type != gguf.TypeArray {
		return v.Data
	}
	n := v.Len()
	m := min(n, arrayPreview)
	var head any
	switch d := v.Data.(type) {
	case []gguf.Value:
		out := make([]any, m)
		for i := range out {
			out[i] = previewValue(d[i])
		}
		head = out
	default:
		head = sliceHead(v.Data, m)
	}
	return map[string]any{"type": "array", "elem": v.Elem.String(), "len": n, "head": head}
}

func sliceHead(s any, m int) any {
	switch d := s.(type) {
	case []uint8:
		// Printed as numbers, not base64.
		out := make([]int, m)
		for i := range out {
			out[i] = int(d[i])
		}
		return out
	case []int8:
		return d[:m]
	case []uint16:
		return d[:m]
	case []int16:
		return d[:m]
	case []uint32:
		return d[:m]
	case []int32:
		return d[:m]
	case []float32:
		return d[:m]
	case []bool:
		return d[:m]
	case []string:
		return d[:m]
	case []uint64:
		return d[:m]
	case []int64:
		return d[:m]
	case []float64:
		return d[:m]
	}
	return nil
}

type tensorRow struct {
	Name   string   `json:"name"`
	Type   string   `json:"type"`
	Shape  []uint64 `json:"shape"`
	Bytes  uint64   `json:"bytes"`
	Offset uint64   `json:"offset"`
}

func inspectJSON(w io.Writer, f *gguf.File) error {
	meta := []map[string]any{}
	for _, k := range f.Keys() {
		v, _ := f.Value(k)
		meta = append(meta, map[string]any{"key": k, "type": v.Type.String(), "value": previewValue(v)})
	}
	var rows []tensorRow
	var total, elems uint64
	byType := map[string]uint64{}
	for _, t := range f.Tensors {
		rows = append(rows, tensorRow{t.Name, t.Type.String(), t.Dims, t.Size, t.Offset})
		total += t.Size
		elems += t.Elements()
		byType[t.Type.String()] += t.Size
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	cfg, refusal := modelSummary(f)
	mod := map[string]any{"config": cfg}
	if refusal != "" {
		mod = map[string]any{"refused": refusal}
	}
	return enc.Encode(map[string]any{
		"version": f.Version, "alignment": f.Alignment, "data_offset": f.DataOffset,
		"metadata": meta, "tensors": rows, "model": mod,
		"totals": map[string]any{"tensors": len(f.Tensors), "elements": elems, "bytes": total, "bytes_by_type": byType},
	})
}

func inspectText(w io.Writer, f *gguf.File) error {
	var b strings.Builder
	fmt.Fprintf(&b, "GGUF v%d, alignment %d, %d metadata keys, %d tensors, data at byte %d\n\nMetadata:\n",
		f.Version, f.Alignment, len(f.Keys()), len(f.Tensors), f.DataOffset)
	for _, k := range f.Keys() {
		v, _ := f.Value(k)
		fmt.Fprintf(&b, "  %-45s %-7s %s\n", k, v.Type, formatValue(v))
	}
	b.WriteString("\nTensors:\n")
	var total, elems uint64
	byType := map[string]uint64{}
	for _, t := range f.Tensors {
		fmt.Fprintf(&b, "  %-40s %-7s %-22s %12d B\n", t.Name, t.Type, fmt.Sprint(t.Dims), t.Size)
		total += t.Size
		elems += t.Elements()
		byType[t.Type.String()] += t.Size
	}
	types := make([]string, 0, len(byType))
	for t := range byType {
		types = append(types, t)
	}
	sort.Strings(types)
	fmt.Fprintf(&b, "\nTotal: %d tensors, %d elements, %d bytes (%.2f MiB)\n", len(f.Tensors), elems, total, float64(total)/(1<<20))
	for _, t := range types {
		fmt.Fprintf(&b, "  %-7s %12d bytes\n", t, byType[t])
	}
	if err := f.CheckSupported(); err != nil {
		fmt.Fprintf(&b, "\nWarning: %v\n", err)
	}
	if cfg, refusal := modelSummary(f); refusal != "" {
		fmt.Fprintf(&b, "\nModel: sluice refuses this file: %s\n", refusal)
	} else {
		fmt.Fprintf(&b, "\nModel: %s\n", cfg)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func formatValue(v gguf.Value) string {
	if v.Type != gguf.TypeArray {
		s := v.String()
		if len(s) > 120 {
			s = s[:117] + "..."
		}
		return s
	}
	p := previewValue(v).(map[string]any)
	var hb strings.Builder
	enc := json.NewEncoder(&hb)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(p["head"])
	head := strings.TrimSpace(hb.String())
	more := ""
	if v.Len() > arrayPreview {
		more = " ..."
	}
	s := fmt.Sprintf("[%s x %d] %s%s", v.Elem, v.Len(), head, more)
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}
