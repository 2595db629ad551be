// Package mailrender turns a mail event into the subject and text body of
// an e-mail, from the templates under templates/<language>/<name>.tmpl
// (each defines "subject" and "body"). Languages: en and ko; any other
// language renders in en. An unknown template renders as "generic".
//
// The data keys each template needs are part of the event contract and
// listed in pkg/events; Render refuses a mail without them, so the mailer
// can dead-letter it instead of sending a blank code.
package mailrender

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strings"
	"text/template"
	"unicode/utf8"

	"github.com/nubes-io/nubes/pkg/events"
)

//go:embed templates
var files embed.FS

// DefaultLanguage is used for a language without templates.
const DefaultLanguage = "en"

// maxSubject bounds a subject, in characters.
const maxSubject = 200

// required lists, per template, groups of data keys of which at least one
// must be present and not blank.
var required = map[string][][]string{
	events.MailInvite:        {{"link", "token", "temporary_password"}},
	events.MailVerifyEmail:   {{"code"}},
	events.MailMFACode:       {{"code"}},
	events.MailResetPassword: {{"link", "temporary_password"}},
	events.MailNotification:  {{"title"}},
}

// Content is a rendered e-mail.
type Content struct {
	Template string // the template used (generic for an unknown one)
	Language string // the language used
	Subject  string // one line
	Body     string // text, LF line ends, ending in a newline
}

// Renderer holds the parsed templates.
type Renderer struct {
	byLang map[string]map[string]*template.Template
}

// New parses the embedded templates.
func New() (*Renderer, error) {
	r := &Renderer{byLang: map[string]map[string]*template.Template{}}
	err := fs.WalkDir(files, "templates", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		lang := path.Base(path.Dir(p))
		name := strings.TrimSuffix(path.Base(p), ".tmpl")
		src, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		t, err := template.New(name).Option("missingkey=zero").Parse(string(src))
		if err != nil {
			return fmt.Errorf("template %s: %w", p, err)
		}
		if t.Lookup("subject") == nil || t.Lookup("body") == nil {
			return fmt.Errorf("template %s: needs a subject and a body", p)
		}
		if r.byLang[lang] == nil {
			r.byLang[lang] = map[string]*template.Template{}
		}
		r.byLang[lang][name] = t
		return nil
	})
	if err != nil {
		return nil, err
	}
	if r.byLang[DefaultLanguage][events.MailGeneric] == nil {
		return nil, fmt.Errorf("templates: no %s/%s", DefaultLanguage, events.MailGeneric)
	}
	return r, nil
}

// Languages reports the languages with templates.
func (r *Renderer) Languages() []string {
	var out []string
	for l := range r.byLang {
		out = append(out, l)
	}
	return out
}

// Templates reports the template names of a language.
func (r *Renderer) Templates(lang string) []string {
	var out []string
	for n := range r.byLang[lang] {
		out = append(out, n)
	}
	return out
}

// Language maps a user's language ("ko", "ko-KR", "EN_us") to one with
// templates, or DefaultLanguage.
func (r *Renderer) Language(lang string) string {
	l := strings.ToLower(strings.TrimSpace(lang))
	if i := strings.IndexAny(l, "-_"); i >= 0 {
		l = l[:i]
	}
	if _, ok := r.byLang[l]; ok {
		return l
	}
	return DefaultLanguage
}

// Render renders template name in language lang with data.
func (r *Renderer) Render(name, lang string, data map[string]string) (Content, error) {
	lang = r.Language(lang)
	if _, ok := r.byLang[DefaultLanguage][name]; !ok {
		name = events.MailGeneric
	}
	for _, group := range required[name] {
		if !anyPresent(data, group) {
			return Content{}, fmt.Errorf("template %s needs data %s", name, strings.Join(group, " or "))
		}
	}
	t := r.byLang[lang][name]
	if t == nil {
		lang, t = DefaultLanguage, r.byLang[DefaultLanguage][name]
	}
	if data == nil {
		data = map[string]string{}
	}
	var subj, body bytes.Buffer
	if err := t.ExecuteTemplate(&subj, "subject", data); err != nil {
		return Content{}, fmt.Errorf("template %s/%s: %w", lang, name, err)
	}
	if err := t.ExecuteTemplate(&body, "body", data); err != nil {
		return Content{}, fmt.Errorf("template %s/%s: %w", lang, name, err)
	}
	c := Content{Template: name, Language: lang, Subject: oneLine(subj.String()), Body: tidy(body.String())}
	if c.Subject == "" {
		return Content{}, fmt.Errorf("template %s/%s: empty subject", lang, name)
	}
	return c, nil
}

func anyPresent(data map[string]string, keys []string) bool {
	for _, k := range keys {
		if strings.TrimSpace(data[k]) != "" {
			return true
		}
	}
	return false
}

// oneLine collapses white space (line breaks included: a subject is a
// header) and bounds the length.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) > maxSubject {
		s = string([]rune(s)[:maxSubject-1]) + "…"
	}
	return s
}

var blankLines = regexp.MustCompile(`\n{3,}`)

// tidy trims trailing spaces, keeps at most one blank line in a row, and
// drops blank lines at both ends, so templates can be laid out freely.
func tidy(s string) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t")
	}
	s = blankLines.ReplaceAllString(strings.Join(lines, "\n"), "\n\n")
	return strings.Trim(s, "\n") + "\n"
}
