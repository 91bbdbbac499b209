package main

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"
)

// emit prints one answer: v as a JSON object with -o json, or a table with
// header and rows otherwise.
func (a *app) emit(v any, header []string, rows ...[]string) error {
	if a.output == "json" {
		enc := json.NewEncoder(a.stdout)
		enc.SetEscapeHTML(false)
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 8, 2, ' ', 0)
	tw.Write([]byte(strings.Join(header, "\t") + "\n"))
	for _, r := range rows {
		tw.Write([]byte(strings.Join(r, "\t") + "\n"))
	}
	return tw.Flush()
}

// tableText returns b as it appears in a table: as is if it is printable
// UTF-8 text, otherwise quoted as a Go string literal so that control
// characters and invalid bytes cannot garble the table. The empty value is
// shown as "".
func tableText(b []byte) string {
	s := string(b)
	if s == "" || !utf8.ValidString(s) {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if !strconv.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// jsonValue returns b for JSON: as a string if it is valid UTF-8, else as
// base64 in the second result.
func jsonValue(b []byte) (text, b64 *string) {
	if utf8.Valid(b) {
		s := string(b)
		return &s, nil
	}
	s := base64.StdEncoding.EncodeToString(b)
	return nil, &s
}

// fmtDur formats d for a table: milliseconds above a second, microseconds
// below.
func fmtDur(d time.Duration) string {
	if d >= time.Second || d <= -time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Microsecond).String()
}

// seconds returns d in seconds, for JSON fields ending in _seconds.
func seconds(d time.Duration) float64 { return d.Seconds() }

// getJSON is the JSON answer of get.
type getJSON struct {
	Key         string  `json:"key"`
	Value       *string `json:"value,omitempty"`
	ValueBase64 *string `json:"value_base64,omitempty"`
	Version     uint64  `json:"version"`
	Found       bool    `json:"found"`
}

// writeJSON is the JSON answer of put, del and cas.
type writeJSON struct {
	Key     string `json:"key"`
	Version uint64 `json:"version"`
}

// deleteJSON is the JSON answer of del: how many keys it removed, and the
// version of the deletion (or the key's, if it removed nothing).
type deleteJSON struct {
	Key     string `json:"key"`
	Deleted int    `json:"deleted"`
	Version uint64 `json:"version"`
}

// writeLeaseJSON is the JSON answer of write-lease.
type writeLeaseJSON struct {
	Key         string  `json:"key"`
	Token       uint64  `json:"token"`
	TermSeconds float64 `json:"term_seconds"`
	// Version is the version written under the lease, absent if no value
	// was given.
	Version uint64 `json:"version,omitempty"`
}

// statsJSON is the JSON answer of stats: the server's counters.
type statsJSON struct {
	Revision               uint64            `json:"revision"`
	Sessions               int               `json:"sessions"`
	Leases                 int               `json:"leases"`
	LeaseStorageBytes      int64             `json:"lease_storage_bytes"`
	WriteLeases            int               `json:"write_leases"`
	WritesWaiting          int               `json:"writes_waiting"`
	InvalidationsSent      uint64            `json:"invalidations_sent"`
	InvalidationsAcked     uint64            `json:"invalidations_acked"`
	InvalidationsExpired   uint64            `json:"invalidations_expired"`
	InvalidationsCancelled uint64            `json:"invalidations_cancelled"`
	Recalls                uint64            `json:"recalls"`
	LeasesRenewed          uint64            `json:"leases_renewed"`
	MessagesIn             map[string]uint64 `json:"messages_in"`
	MessagesOut            map[string]uint64 `json:"messages_out"`
	UptimeSeconds          float64           `json:"uptime_seconds"`
	DefaultTermSeconds     float64           `json:"default_term_seconds"`
	EpsilonSeconds         float64           `json:"epsilon_seconds"`
	WritesAllowedInSeconds float64           `json:"writes_allowed_in_seconds"`
	// Alarm is the NOSPACE alarm that refuses writes; absent when none.
	Alarm string `json:"alarm,omitempty"`
	// What the server's bounds on memory hold, and what they refused.
	InflightBytes   int64  `json:"inflight_bytes"`
	Handshakes      int64  `json:"handshakes"`
	LeasesRefused   uint64 `json:"leases_refused"`
	WritesRefused   uint64 `json:"writes_refused"`
	SessionsRefused uint64 `json:"sessions_refused"`
	Retries         uint64 `json:"retries"`
	// TTL leases: how many the leader tracks; the revocations applied,
	// the expiries among them, the keys they deleted, how long they
	// waited for their keys' holders in all and how many holders they
	// invalidated or recalled; and the leases keep-alives renewed.
	TTLLeases              int     `json:"ttl_leases"`
	TTLRevoked             uint64  `json:"ttl_revoked"`
	TTLExpired             uint64  `json:"ttl_expired"`
	TTLKeysDeleted         uint64  `json:"ttl_keys_deleted"`
	TTLRevokeWaitedSeconds float64 `json:"ttl_revoke_waited_seconds"`
	TTLRevokeHolders       uint64  `json:"ttl_revoke_holders"`
	TTLKeepAlives          uint64  `json:"ttl_keep_alives"`
	// The event history: its compaction point, and what it holds.
	HistoryCompacted uint64 `json:"history_compacted"`
	HistoryBytes     uint64 `json:"history_bytes"`
	HistoryEvents    uint64 `json:"history_events"`
}

// statusJSON is the JSON answer of status.
type statusJSON struct {
	Endpoint string `json:"endpoint"`
	// ServerVersion is the server's build; absent from a server that does
	// not send it.
	ServerVersion      string  `json:"server_version,omitempty"`
	CAFile             string  `json:"ca_file"`
	SessionID          uint64  `json:"session_id"`
	EpsilonSeconds     float64 `json:"epsilon_seconds"`
	DefaultTermSeconds float64 `json:"default_term_seconds"`
	MaxValueSize       int     `json:"max_value_size"`
	Revision           uint64  `json:"revision"`
	// Compacted is the compaction point of the event history: a watch
	// may start from the revision after it, and no earlier.
	Compacted     uint64  `json:"compacted_revision"`
	Sessions      int     `json:"sessions"`
	UptimeSeconds float64 `json:"uptime_seconds"`
	// WritesHeld is true while a restarted server holds writes until the
	// leases granted before the restart have run out.
	WritesHeld             bool    `json:"writes_held"`
	WritesAllowedInSeconds float64 `json:"writes_allowed_in_seconds"`
	RTTSeconds             float64 `json:"rtt_seconds"`
	// Alarm is the NOSPACE alarm that refuses writes; absent when none.
	Alarm string `json:"alarm,omitempty"`
	// Members, for a node of a cluster, are the members from the leader,
	// each with its own status if one of --endpoints is that member.
	Members []memberJSON `json:"members,omitempty"`
}

// versionJSON is the JSON answer of version.
type versionJSON struct {
	Version   string `json:"version"`
	GoVersion string `json:"go_version"`
}
