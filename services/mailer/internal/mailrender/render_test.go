package mailrender

import (
	"slices"
	"strings"
	"testing"

	"github.com/nubes-io/nubes/pkg/events"
)

func TestEveryTemplateInEveryLanguage(t *testing.T) {
	r, err := New()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{events.MailGeneric, events.MailInvite, events.MailMFACode, events.MailNotification, events.MailResetPassword, events.MailVerifyEmail}
	langs := r.Languages()
	slices.Sort(langs)
	if !slices.Equal(langs, []string{"en", "ko"}) {
		t.Fatalf("languages %v", langs)
	}
	for _, l := range langs {
		got := r.Templates(l)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s templates %v, want %v", l, got, want)
		}
	}
}

func TestRender(t *testing.T) {
	r, err := New()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, template, lang string
		data                 map[string]string
		wantLang             string
		subject              string   // substring
		body                 []string // substrings
		notBody              []string
	}{
		{"invite link en", "invite", "en", map[string]string{"name": "Ada", "user_id": "ada", "link": "https://console/x?t=1", "domain_name": "acme", "expires_hours": "168"},
			"en", "Your Nubes account in acme", []string{"Hello Ada,", "https://console/x?t=1", "domain acme", "Your user ID is ada.", "expires in 168 hours"}, []string{"temporary password", "<no value>"}},
		{"invite temporary password ko", "invite", "ko", map[string]string{"user_id": "kim", "temporary_password": "Tmp12345abcd"},
			"ko", "Nubes 계정이 생성되었습니다", []string{"kim님, 안녕하세요.", "임시 비밀번호", "Tmp12345abcd"}, []string{"만료"}},
		{"invite token", "invite", "en", map[string]string{"token": "tok-1"}, "en", "Your Nubes account", []string{"Hello there,", "tok-1"}, nil},
		{"verify_email en", "verify_email", "en", map[string]string{"code": "123456", "expires_minutes": "60"},
			"en", "Confirm your e-mail address", []string{"123456", "expires in 60 minutes"}, nil},
		{"verify_email ko-KR", "verify_email", "ko-KR", map[string]string{"code": "654321"},
			"ko", "이메일 주소 확인", []string{"654321"}, nil},
		{"mfa enable", "mfa_code", "en", map[string]string{"code": "111111", "purpose": "enable"},
			"en", "verification code", []string{"turn on multi-factor", "111111"}, nil},
		{"mfa disable ko", "mfa_code", "KO", map[string]string{"code": "222222", "purpose": "disable"},
			"ko", "인증 코드", []string{"끄려면", "222222"}, nil},
		{"mfa login", "mfa_code", "en", map[string]string{"code": "333333", "purpose": "login"},
			"en", "verification code", []string{"finish signing in", "333333"}, nil},
		{"mfa no purpose", "mfa_code", "en", map[string]string{"code": "444444"},
			"en", "verification code", []string{"confirm your request"}, nil},
		{"reset link", "reset_password", "en", map[string]string{"link": "https://c/r?sso_access_token=abc", "user_id": "u1"},
			"en", "Reset your Nubes password", []string{"https://c/r?sso_access_token=abc", "account u1"}, nil},
		{"reset temporary ko", "reset_password", "ko", map[string]string{"temporary_password": "Abcdef123456"},
			"ko", "비밀번호 재설정", []string{"Abcdef123456"}, nil},
		{"unknown language falls back", "verify_email", "fr", map[string]string{"code": "555555"},
			"en", "Confirm your e-mail", []string{"555555"}, nil},
		{"unknown template is generic", "welcome_aboard", "en", map[string]string{"subject": "Hi\nthere", "plan": "gold"},
			"en", "Hi there", []string{"plan: gold"}, []string{"subject:"}},
		{"notification", "notification", "en", map[string]string{"title": "[Alerting] disk\nfull", "description": "90% used", "tags": "Urgency: HIGH",
			"link": "https://console/alert", "callback_label": "Acknowledge", "callback_url": "https://nubes/ack/k1"},
			"en", "[Alerting] disk full", []string{"90% used", "Urgency: HIGH", "Details: https://console/alert", "Acknowledge: https://nubes/ack/k1"}, []string{"<no value>"}},
		{"notification title only ko", "notification", "ko", map[string]string{"title": "작업 실패"},
			"ko", "작업 실패", []string{"작업 실패"}, []string{"자세히", "열기"}},
		{"generic body", "generic", "ko", map[string]string{"body": "Line one\nLine two"},
			"ko", "Nubes 알림", []string{"Line one\nLine two"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := r.Render(tc.template, tc.lang, tc.data)
			if err != nil {
				t.Fatal(err)
			}
			if c.Language != tc.wantLang {
				t.Errorf("language %q, want %q", c.Language, tc.wantLang)
			}
			if !strings.Contains(c.Subject, tc.subject) || strings.ContainsAny(c.Subject, "\r\n") {
				t.Errorf("subject %q, want %q", c.Subject, tc.subject)
			}
			for _, s := range tc.body {
				if !strings.Contains(c.Body, s) {
					t.Errorf("body lacks %q:\n%s", s, c.Body)
				}
			}
			for _, s := range tc.notBody {
				if strings.Contains(c.Body, s) {
					t.Errorf("body has %q:\n%s", s, c.Body)
				}
			}
			if strings.Contains(c.Body, "\n\n\n") || strings.HasPrefix(c.Body, "\n") || !strings.HasSuffix(c.Body, "Nubes\n") {
				t.Errorf("untidy body:\n%q", c.Body)
			}
		})
	}
}

func TestRenderRefusesMissingData(t *testing.T) {
	r, err := New()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		template string
		data     map[string]string
	}{
		{"invite", map[string]string{"user_id": "u"}},
		{"verify_email", nil},
		{"mfa_code", map[string]string{"code": "  "}},
		{"reset_password", map[string]string{"token": "t"}},
		{"notification", map[string]string{"description": "no title", "title": "  "}},
	} {
		if _, err := r.Render(tc.template, "en", tc.data); err == nil {
			t.Errorf("%s with %v rendered", tc.template, tc.data)
		}
	}
}

func TestLongSubjectIsBounded(t *testing.T) {
	r, err := New()
	if err != nil {
		t.Fatal(err)
	}
	c, err := r.Render("generic", "en", map[string]string{"subject": strings.Repeat("가", 500)})
	if err != nil {
		t.Fatal(err)
	}
	if n := len([]rune(c.Subject)); n != maxSubject {
		t.Fatalf("subject of %d runes", n)
	}
}
