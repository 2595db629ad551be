package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/smtp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestFixture checks the suite's own SMTP sink and plugin server, so a
// mailer or inventory test that fails later fails for its own reasons.
func TestFixture(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clearSink(t) // mail of earlier tests
	smtpURL, err := endpoint(ctx, st.fixture, "2525/tcp")
	if err != nil {
		t.Fatal(err)
	}
	msg := "From: nubes@example.com\r\nTo: u1@example.com\r\nMessage-Id: <fixture-check@nubes>\r\n" +
		"Subject: =?UTF-8?B?7ZWc6rWt7Ja0?=\r\n\r\nhello\r\n"
	if err := smtp.SendMail(strings.TrimPrefix(smtpURL, "http://"), nil, "nubes@example.com", []string{"u1@example.com"}, []byte(msg)); err != nil {
		t.Fatalf("smtp: %v", err)
	}
	var mails []struct {
		To        []string `json:"to"`
		MessageID string   `json:"message_id"`
		Subject   string   `json:"subject"`
	}
	status, body, err := get(ctx, st.control+"/mail")
	if err != nil || status != http.StatusOK || json.Unmarshal(body, &mails) != nil {
		t.Fatalf("GET /mail: %d %v %s", status, err, body)
	}
	// Only this test's message: a late mail of another test may be there too.
	mails = slices.DeleteFunc(mails, func(m struct {
		To        []string `json:"to"`
		MessageID string   `json:"message_id"`
		Subject   string   `json:"subject"`
	}) bool {
		return m.MessageID != "<fixture-check@nubes>"
	})
	if len(mails) != 1 || mails[0].MessageID != "<fixture-check@nubes>" || mails[0].Subject != "한국어" || mails[0].To[0] != "u1@example.com" {
		t.Fatalf("mail = %+v", mails)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, st.control+"/mail", nil)
	if resp, err := httpClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("DELETE /mail: %v", err)
	} else {
		resp.Body.Close()
	}

	pluginURL, err := endpoint(ctx, st.fixture, "8000/tcp")
	if err != nil {
		t.Fatal(err)
	}
	if status, _, err := post(ctx, pluginURL, "/collector/v1/collect", "", []byte(`{"options": {}}`)); err != nil || status != http.StatusOK {
		t.Fatalf("plugin: %d %v", status, err)
	}
	var reqs []struct {
		Path string          `json:"path"`
		Body json.RawMessage `json:"body"`
	}
	status, body, err = get(ctx, st.control+"/plugin/requests")
	if err != nil || status != http.StatusOK || json.Unmarshal(body, &reqs) != nil || len(reqs) != 1 || reqs[0].Path != "/collector/v1/collect" {
		t.Fatalf("plugin requests: %d %v %s", status, err, body)
	}
}
