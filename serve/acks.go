package serve

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/reconciler/reconciler/acks"
)

// ackBody is POST /items/{fingerprint}/ack's body.
type ackBody struct {
	Note   string `json:"note"`
	Reopen bool   `json:"reopen"`
}

// postAck records that the caller has looked at the item a fingerprint
// names (reconciler ack over HTTP): the caller's name is who acknowledged
// it. It answers 200 with the item and the acknowledgement; 400 for a
// missing note or a malformed fingerprint; 404 when the fingerprint names
// no refused or reported item of the latest runs.
func (s *Server) postAck(w http.ResponseWriter, r *http.Request, caller string) {
	fp := r.PathValue("fingerprint")
	if !acks.Valid(fp) {
		writeJSON(w, http.StatusBadRequest, apiError{Error: "a fingerprint is 16 hex digits, as the report's fingerprint column shows", Field: "fingerprint"})
		return
	}
	var b ackBody
	if !decodeBody(w, r, &b) {
		return
	}
	if strings.TrimSpace(b.Note) == "" {
		writeJSON(w, http.StatusBadRequest, apiError{Error: `note is required: say why the item needs nothing more, e.g. {"note": "refunded by hand, ticket 4411"}`, Field: "note"})
		return
	}
	targets, err := acks.Resolve(r.Context(), s.Runner.DB, []string{fp})
	if errors.Is(err, acks.ErrUnknown) {
		writeJSON(w, http.StatusNotFound, apiError{Error: fmt.Sprintf("fingerprint %s names no refused or reported item of the latest runs", fp), Field: "fingerprint"})
		return
	}
	var rows []acks.Ack
	if err == nil {
		rows, err = acks.Record(r.Context(), s.Runner.DB, targets, caller, b.Note, s.clock().Now(), b.Reopen)
	}
	if err != nil {
		s.Log.Error("acknowledgement not recorded", "fingerprint", fp, "error", err)
		writeJSON(w, http.StatusInternalServerError, apiError{Error: "could not record the acknowledgement"})
		return
	}
	if s.OnAck != nil {
		s.OnAck(r.Context())
	}
	status := acks.StatusAcknowledged
	if b.Reopen {
		status = "reopened"
	}
	writeJSON(w, http.StatusOK, ackAnswer{Item: targets[0], Status: status,
		Acknowledged: ackRecord{By: caller, Note: b.Note, At: rows[0].AcknowledgedAt, Reopened: b.Reopen}})
}

// ackAnswer is POST /items/{fingerprint}/ack's 200 answer.
type ackAnswer struct {
	Item acks.Target `json:"item"`
	// Status is acknowledged, or reopened when the body said reopen.
	Status       string    `json:"status"`
	Acknowledged ackRecord `json:"acknowledged"`
}

// ackRecord is who acknowledged the item (the token's caller), why and when.
type ackRecord struct {
	By       string    `json:"by"`
	Note     string    `json:"note"`
	At       time.Time `json:"at"`
	Reopened bool      `json:"reopened"`
}
