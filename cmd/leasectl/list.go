package main

import (
	"context"
	"strconv"

	"github.com/leased/leased/client"
)

// listJSON is the JSON answer of a listing: get --prefix, get KEY END, or
// get --keys-only.
type listJSON struct {
	KVs []kvJSON `json:"kvs"`
	// Count is the number of keys printed.
	Count int `json:"count"`
	// Revision is the revision of the listing's first page. A listing of
	// more than one page (client.ListResult.More) reads each page at its
	// own revision.
	Revision uint64 `json:"revision"`
	// More says that --limit stopped the listing before the range's end.
	More bool `json:"more"`
}

// kvJSON is one key of a listing.
type kvJSON struct {
	Key         string  `json:"key"`
	Value       *string `json:"value,omitempty"`
	ValueBase64 *string `json:"value_base64,omitempty"`
	Version     uint64  `json:"version"`
}

// listing is what get lists: the keys from start to end (empty: no end),
// at most limit of them (0: all), with values unless keysOnly.
type listing struct {
	start, end string
	limit      int
	keysOnly   bool
}

// list prints a listing, reading it page by page until its end or its
// limit. An empty listing prints nothing and exits 0, as etcdctl's does.
func (a *app) list(ctx context.Context, c *client.Client, l listing) error {
	var (
		out   listJSON
		vals  [][]byte // the values, for the table
		after string   // the last key listed: "" before the first page
	)
	for {
		opts := []client.ListOption{}
		if l.keysOnly {
			opts = append(opts, client.KeysOnly())
		}
		if l.limit > 0 {
			opts = append(opts, client.Limit(l.limit-len(out.KVs)))
		}
		if after != "" {
			opts = append(opts, client.StartAfter(after))
		}
		page, err := c.ListRange(ctx, l.start, l.end, opts...)
		if err != nil {
			return err
		}
		if after == "" {
			out.Revision = page.Revision
		}
		for _, kv := range page.KVs {
			j := kvJSON{Key: kv.Key, Version: kv.Version}
			if !l.keysOnly {
				j.Value, j.ValueBase64 = jsonValue(kv.Value)
			}
			out.KVs = append(out.KVs, j)
			vals = append(vals, kv.Value)
		}
		if len(page.KVs) > 0 {
			after = page.KVs[len(page.KVs)-1].Key
		}
		if !page.More || len(page.KVs) == 0 {
			break
		}
		if l.limit > 0 && len(out.KVs) >= l.limit {
			out.More = true
			break
		}
	}
	out.Count = len(out.KVs)
	if out.KVs == nil {
		out.KVs = []kvJSON{}
	}
	if a.output != "json" && len(out.KVs) == 0 {
		return nil
	}
	header := []string{"KEY", "VALUE", "VERSION"}
	if l.keysOnly {
		header = []string{"KEY", "VERSION"}
	}
	rows := make([][]string, len(out.KVs))
	for i, kv := range out.KVs {
		ver := strconv.FormatUint(kv.Version, 10)
		if l.keysOnly {
			rows[i] = []string{tableText([]byte(kv.Key)), ver}
			continue
		}
		rows[i] = []string{tableText([]byte(kv.Key)), tableText(vals[i]), ver}
	}
	return a.emit(out, header, rows...)
}
