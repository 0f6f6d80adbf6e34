package router

import (
	"context"
	"testing"
	"time"
)

// GET /v1/models/{id} answers the served model (as the official client's
// Models.Get expects) and 404 model_not_found for any other id; "created"
// is the server's start time, in both the list and the object.
func TestModelByID(t *testing.T) {
	before := time.Now().Unix()
	h := newHarness(t, 64, nil)
	after := time.Now().Unix()
	c := h.client("")
	ctx := context.Background()
	m, err := c.Models.Get(ctx, "echo-test-double")
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != "echo-test-double" || m.Created < before || m.Created > after {
		t.Fatalf("model %+v, want id echo-test-double created in [%d, %d]", m, before, after)
	}
	page, err := c.Models.List(ctx)
	if err != nil || len(page.Data) != 1 || page.Data[0].Created != m.Created {
		t.Fatalf("list: %v %+v (created %d)", err, page, m.Created)
	}
	_, err = c.Models.Get(ctx, "gpt-4")
	apiErr(t, err, 404, CodeUnknownModel)
	_, err = c.Models.Get(ctx, "org/echo-test-double")
	apiErr(t, err, 404, CodeUnknownModel)
}
