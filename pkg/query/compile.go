package query

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/tenancy"
)

// Resource describes what a list may do on one collection.
type Resource struct {
	KeywordFields []string  // searched by keyword
	DefaultSort   []SortKey // used when the query has no sort
	MinimalFields []string  // returned with minimal: true
	MaxLimit      int       // rows returned at most per call (default MaxPageSize)
	// Fields, when set, are the only top-level fields a query may read
	// (filter, sort, only, stat stages): the fields of the resource's Info.
	Fields []string
	// Maps are the free-form fields of the resource's Info
	// (freeform.FieldsOf): a path into one reads its keys as stored
	// (escaped), so `tags.kubernetes.io/cluster/prod` names that tag.
	Maps freeform.Fields
	// Tenancy names the fields that hold a record's domain, workspace,
	// project and owner: the kit's *For calls (store.GetFor, SearchFor,
	// stat.RunFor, analyze.RunFor) confine every read and write to the
	// caller's reach with it (package tenancy).
	Tenancy tenancy.Fields
	// Secret are the stored paths that hold a credential, key or sealed
	// value: no query of any caller reads them, a path under them or above
	// them, in any slot (filter, filter_or, sort, only, keyword, and stat's
	// and analyze's distinct, group and fields). See NoSecret.
	Secret []string
	// GetOnly are top-level fields a list leaves out, even when its
	// `only` names them: heavy ones (an event's raw body) that a page of
	// a thousand rows must not carry; a get still answers them.
	GetOnly []string
	// MaxPageBytes, when set, bounds the stored size of the rows of one
	// page: a list stops before the row that would pass it (never before
	// the first), and total_count still counts them all.
	MaxPageBytes int
}

// Plan is a compiled list: what store.List sends to MongoDB.
type Plan struct {
	Filter     bson.D
	Sort       bson.D
	Skip       int64
	Limit      int64
	Projection bson.D   // nil: whole documents
	Fields     []string // top-level response fields to keep (only/minimal), nil for all
	CountOnly  bool
	MaxBytes   int // 0: no bound (Resource.MaxPageBytes)
}

// DefaultMaxLimit caps a list that asks for no page or a larger one,
// unless SetMaxPageSize changed it.
const DefaultMaxLimit = 1000

var maxPageSize atomic.Int64

// SetMaxPageSize sets the rows a list answers at most per call (config
// max_page_size; upstream's set_query_page_limit): a list asking for no
// page or a larger one gets that many, and total_count still counts every
// row. n <= 0 restores DefaultMaxLimit.
func SetMaxPageSize(n int) { maxPageSize.Store(int64(max(n, 0))) }

// MaxPageSize is the rows a list answers at most per call.
func MaxPageSize() int {
	if n := maxPageSize.Load(); n > 0 {
		return int(n)
	}
	return DefaultMaxLimit
}

// Compile turns q into a plan. scope holds the tenancy conditions (domain,
// workspace) that every row must meet; they are ANDed first.
func Compile(q *Query, r Resource, scope bson.D) (*Plan, error) {
	if q == nil {
		q = &Query{}
	}
	if err := r.CheckSecret(q); err != nil { // first: the answer depends on nothing else
		return nil, err
	}
	if err := q.Validate(); err != nil {
		return nil, err
	}
	q = q.stored(r.Maps)
	// A path r does not show reads as a field no document has: conditions
	// on it are decided without the store, and sort and only drop it.
	filter, err := Filter(scope, r.Unshown(q.Filter), r.Unshown(q.FilterOr), q.Keyword, r.KeywordFields)
	if err != nil {
		return nil, err
	}
	p := &Plan{Filter: filter, CountOnly: q.CountOnly, MaxBytes: r.MaxPageBytes}

	sortKeys := []SortKey(q.Sort)
	if len(sortKeys) == 0 {
		sortKeys = r.DefaultSort
	}
	sortKeys = slices.DeleteFunc(slices.Clone(sortKeys), func(s SortKey) bool { return !r.Shows(s.Key) })
	for _, s := range sortKeys {
		dir := 1
		if s.Desc {
			dir = -1
		}
		p.Sort = append(p.Sort, bson.E{Key: s.Key, Value: dir})
	}
	if !slices.ContainsFunc(sortKeys, func(s SortKey) bool { return s.Key == "_id" }) {
		p.Sort = append(p.Sort, bson.E{Key: "_id", Value: 1}) // stable paging
	}

	maxLimit := r.MaxLimit
	if maxLimit <= 0 {
		maxLimit = MaxPageSize()
	}
	p.Limit = int64(maxLimit)
	if q.Page != nil {
		if q.Page.Start > 1 {
			p.Skip = int64(q.Page.Start - 1)
		}
		if q.Page.Limit > 0 && q.Page.Limit < maxLimit {
			p.Limit = int64(q.Page.Limit)
		}
	}

	fields := q.Only
	if q.Minimal && len(fields) == 0 {
		fields = r.MinimalFields
	}
	if len(fields) > 0 {
		keep := r.shown(append(slices.Clone(fields), sortKeysOf(sortKeys)...))
		keep = slices.DeleteFunc(keep, func(f string) bool {
			top, _, _ := strings.Cut(f, ".")
			return slices.Contains(r.GetOnly, top)
		})
		p.Projection, p.Fields = projection(keep)
	} else if len(r.GetOnly) > 0 {
		for _, f := range r.GetOnly {
			p.Projection = append(p.Projection, bson.E{Key: f, Value: 0})
		}
	}
	return p, nil
}

// stored is q with its paths as stored (see Resource.Maps): a copy, so a
// query compiled twice is escaped once.
func (q *Query) stored(maps freeform.Fields) *Query {
	if len(maps) == 0 {
		return q
	}
	c := *q
	c.Filter, c.FilterOr = slices.Clone(q.Filter), slices.Clone(q.FilterOr)
	c.Sort, c.Only = slices.Clone(q.Sort), slices.Clone(q.Only)
	_ = c.Paths(maps.Rewrite) // Rewrite never fails
	return &c
}

func sortKeysOf(ks []SortKey) []string {
	out := make([]string, 0, len(ks))
	for _, k := range ks {
		out = append(out, k.Key)
	}
	return out
}

// projection de-duplicates overlapping paths (a parent wins over its
// children): MongoDB refuses a projection holding both "a" and "a.b".
func projection(paths []string) (bson.D, []string) {
	slices.Sort(paths)
	all := map[string]bool{}
	for _, p := range paths {
		all[p] = true
	}
	var kept []string
	for _, p := range paths {
		if len(kept) > 0 && kept[len(kept)-1] == p {
			continue
		}
		if hasAncestor(p, all) {
			continue
		}
		kept = append(kept, p)
	}
	proj := bson.D{}
	top := []string{}
	for _, p := range kept {
		proj = append(proj, bson.E{Key: p, Value: 1})
		t, _, _ := strings.Cut(p, ".")
		if !slices.Contains(top, t) {
			top = append(top, t)
		}
	}
	if len(proj) == 0 { // only fields no document has: rows without fields
		proj = bson.D{{Key: "_id", Value: 1}}
	}
	return proj, top
}

// hasAncestor reports whether a proper parent path of p ("a" of "a.b.c",
// "a.b" of it) is in set. A lexical neighbour check is not enough: "a-b"
// sorts between "a" and "a.b".
func hasAncestor(p string, set map[string]bool) bool {
	for i := len(p) - 1; i > 0; i-- {
		if p[i] == '.' && set[p[:i]] {
			return true
		}
	}
	return false
}

// Filter compiles scope AND filter AND (filter_or OR keyword) into one
// MongoDB filter. It is shared by list and stat. A match condition stays
// an ElemMatch in it: pass the filter through store.Resolve before sending
// it (store.List does).
func Filter(scope bson.D, and, or []Condition, keyword string, keywordFields []string) (bson.D, error) {
	clauses := bson.A{}
	for _, e := range scope {
		clauses = append(clauses, bson.D{e})
	}
	for _, c := range and {
		m, err := compileCondition(c)
		if err != nil {
			return nil, err
		}
		clauses = append(clauses, m)
	}
	alts := bson.A{}
	always := false // an alternative that every row meets makes the OR moot
	for _, c := range or {
		m, err := compileCondition(c)
		if err != nil {
			return nil, err
		}
		always = always || len(m) == 0
		alts = append(alts, m)
	}
	if tokens := strings.Fields(keyword); len(tokens) > 0 {
		vals := make([]any, len(tokens))
		for i, t := range tokens {
			vals[i] = t
		}
		for _, f := range keywordFields {
			m, err := compileCondition(Condition{Key: f, Value: vals, Operator: "contain_in"})
			if err != nil {
				return nil, err
			}
			alts = append(alts, m)
		}
	}
	if len(alts) > 0 && !always {
		clauses = append(clauses, bson.D{{Key: "$or", Value: alts}})
	}
	return conjunction(clauses), nil
}

// conjunction ANDs one-key clauses. When no key repeats (and no match
// condition is among them) they become one flat document, which means the
// same to MongoDB, while FerretDB pushes only a flat document's plain
// fields down to its SQL backend (it scans for anything under $and).
func conjunction(clauses bson.A) bson.D {
	kept := bson.A{}
	flat := bson.D{}
	seen := map[string]bool{}
	for _, c := range clauses {
		d := c.(bson.D)
		if len(d) == 0 {
			continue // matches everything
		}
		kept = append(kept, d)
		if flat == nil {
			continue
		}
		_, em := d[0].Value.(ElemMatch) // resolves to an _id condition, which may repeat
		if len(d) != 1 || seen[d[0].Key] || em {
			flat = nil
			continue
		}
		seen[d[0].Key] = true
		flat = append(flat, d[0])
	}
	switch {
	case len(kept) == 1:
		return kept[0].(bson.D)
	case flat != nil:
		return flat
	}
	return bson.D{{Key: "$and", Value: kept}}
}

var comparison = map[string]string{
	"eq": "$eq", "not": "$ne", "lt": "$lt", "lte": "$lte", "gt": "$gt", "gte": "$gte",
	"datetime_lt": "$lt", "datetime_lte": "$lte", "datetime_gt": "$gt", "datetime_gte": "$gte",
	"timediff_lt": "$lt", "timediff_lte": "$lte", "timediff_gt": "$gt", "timediff_gte": "$gte",
}

// matchNothing is a condition no document meets.
var matchNothing = bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{}}}}}

// compileCondition compiles one condition; one marked absent (Unshown) is
// checked alike and then becomes {} (every row) or matchNothing.
func compileCondition(c Condition) (bson.D, error) {
	m, err := compileStored(c)
	if err != nil || !c.absent {
		return m, err
	}
	if absentMatches(c) {
		return bson.D{}, nil
	}
	return matchNothing, nil
}

// absentMatches reports whether MongoDB matches a document lacking c.Key
// with c (an already checked condition): a missing field equals null, so
// `eq null` and `in [.., null]` match it, and every negation of a test it
// fails; comparisons, patterns, `exists true` and `match` never do.
func absentMatches(c Condition) bool {
	switch c.Operator {
	case "eq":
		return c.Value == nil
	case "not":
		return c.Value != nil
	case "exists":
		b, _ := c.Value.(bool)
		return !b
	case "in", "not_in":
		list, _ := asList(c.Value)
		null := slices.ContainsFunc(list, func(v any) bool { return v == nil })
		return null == (c.Operator == "in")
	case "not_contain", "not_contain_in":
		return true
	}
	return false
}

func compileStored(c Condition) (bson.D, error) {
	if c.Key == "" {
		return nil, errs.New(errs.DBQuery, "Query is invalid. (reason = filter key is missing)")
	}
	if err := checkPath("query.filter.key", c.Key); err != nil {
		return nil, err
	}
	op := c.Operator
	if op == "" {
		return nil, errs.New(errs.DBQuery, "Query is invalid. (reason = filter operator is missing, key = %s)", c.Key)
	}
	if !knownOperator(op) { // before any value check: an unknown operator is ERROR_DB_QUERY whatever its value
		return nil, errs.New(errs.DBQuery, "Query is invalid. (reason = unknown operator %q, key = %s)", op, c.Key)
	}
	field := func(v any) (bson.D, error) { return bson.D{{Key: c.Key, Value: v}}, nil }

	switch op {
	case "in", "not_in", "contain_in", "not_contain_in", "regex_in":
		list, ok := asList(c.Value)
		if !ok {
			return nil, errs.New(errs.OperatorListType, "Operator value must be a list. (key = %s, operator = %s)", c.Key, op)
		}
		switch op {
		case "in":
			return field(bson.D{{Key: "$in", Value: scalarList(list)}})
		case "not_in":
			return field(bson.D{{Key: "$nin", Value: scalarList(list)}})
		}
		alts := bson.A{}
		for _, v := range list {
			text, ok := patternText(v)
			if !ok {
				return nil, errs.New(errs.OperatorListType, "Operator value must be a list of strings. (key = %s, operator = %s)", c.Key, op)
			}
			pattern := regexp.QuoteMeta(text)
			if op == "regex_in" {
				pattern = text
				if _, err := regexp.Compile(pattern); err != nil {
					return nil, errs.New(errs.DBQuery, "Query is invalid. (reason = bad regex %q)", pattern)
				}
			}
			alts = append(alts, bson.D{{Key: c.Key, Value: bson.Regex{Pattern: pattern, Options: "i"}}})
		}
		if len(alts) == 0 { // an empty OR matches nothing; an empty NOR matches all
			if op == "not_contain_in" {
				return bson.D{}, nil
			}
			return field(bson.D{{Key: "$in", Value: bson.A{}}})
		}
		if op == "not_contain_in" {
			return bson.D{{Key: "$nor", Value: alts}}, nil
		}
		return bson.D{{Key: "$or", Value: alts}}, nil
	}

	if _, isList := asList(c.Value); isList {
		return nil, errs.New(errs.OperatorValueType, "Operator value must be a single value. (key = %s, operator = %s)", c.Key, op)
	}
	switch op {
	case "exists":
		b, ok := c.Value.(bool)
		if !ok {
			return nil, errs.New(errs.OperatorBooleanType, "Operator value must be a boolean. (key = %s, operator = exists)", c.Key)
		}
		return field(bson.D{{Key: "$exists", Value: b}})
	case "contain", "not_contain", "regex":
		text, ok := patternText(c.Value)
		if !ok {
			return nil, errs.New(errs.OperatorValueType, "Operator value must be a string. (key = %s, operator = %s)", c.Key, op)
		}
		pattern := regexp.QuoteMeta(text)
		if op == "regex" {
			pattern = text
			if _, err := regexp.Compile(pattern); err != nil {
				return nil, errs.New(errs.DBQuery, "Query is invalid. (reason = bad regex %q)", pattern)
			}
		}
		re := bson.Regex{Pattern: pattern, Options: "i"}
		if op == "not_contain" {
			return field(bson.D{{Key: "$not", Value: re}})
		}
		return field(re)
	case "match":
		m, ok := c.Value.(map[string]any)
		if !ok {
			return nil, errs.New(errs.OperatorDictType, "Operator value must be an object. (key = %s, operator = match)", c.Key)
		}
		em, err := elemMatch(c.Key, m)
		if err != nil {
			return nil, err
		}
		return field(ElemMatch{Path: c.Key, Cond: em})
	}

	mop := comparison[op]
	v := c.Value
	switch {
	case strings.HasPrefix(op, "datetime_"):
		t, err := parseDatetime(v)
		if err != nil {
			return nil, errs.New(errs.DBQuery, "Query is invalid. (reason = %s needs an ISO 8601 time, key = %s)", op, c.Key)
		}
		v = t
	case strings.HasPrefix(op, "timediff_"):
		s, _ := v.(string)
		t, err := Timediff(s, time.Now())
		if err != nil {
			return nil, errs.New(errs.DBQuery, "Query is invalid. (reason = %v, key = %s)", err, c.Key)
		}
		v = t
	case op == "eq" || op == "not":
		// $eq/$ne compare an object value as a document, never as operators.
	default:
		if _, isObj := v.(map[string]any); isObj || v == nil {
			return nil, errs.New(errs.OperatorValueType, "Operator value must be a scalar. (key = %s, operator = %s)", c.Key, op)
		}
		if s, ok := v.(string); ok {
			if t, err := parseDatetime(s); err == nil {
				// An ISO 8601 string compares as a date with a field stored as
				// a date (MongoDB orders types apart, so the string alone
				// would match no date), and as text with one stored as text.
				return bson.D{{Key: "$or", Value: bson.A{
					bson.D{{Key: c.Key, Value: bson.D{{Key: mop, Value: t}}}},
					bson.D{{Key: c.Key, Value: bson.D{{Key: mop, Value: s}}}},
				}}}, nil
			}
		}
	}
	return field(bson.D{{Key: mop, Value: v}})
}

// asList returns v as a list: JSON gives []any, a service may build a
// condition with a typed slice ([]string from a request parameter).
func asList(v any) ([]any, bool) {
	if l, ok := v.([]any); ok {
		return l, true
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array {
		return nil, false
	}
	if rv.Type().Elem().Kind() == reflect.Uint8 { // []byte is binary data, one value
		return nil, false
	}
	l := make([]any, rv.Len())
	for i := range l {
		l[i] = rv.Index(i).Interface()
	}
	return l, true
}

// knownOperator reports whether op is one of spec/semantics.md 1.2.
func knownOperator(op string) bool {
	switch op {
	case "in", "not_in", "contain_in", "not_contain_in", "regex_in",
		"exists", "contain", "not_contain", "regex", "match":
		return true
	}
	_, ok := comparison[op]
	return ok
}

// patternText is the text a regex operator looks for: a string, number or
// boolean as written. Null, objects and lists have none (fmt.Sprint would
// turn them into a pattern like "map[a:1]" that silently matches nothing).
func patternText(v any) (string, bool) {
	switch t := v.(type) {
	case string:
		return t, true
	case int64, float64, bool:
		return fmt.Sprint(t), true
	}
	return "", false
}

// scalarList keeps the list as sent; objects inside are compared as
// documents by MongoDB, never interpreted as operators.
func scalarList(list []any) bson.A { return bson.A(list) }

// elemMatchOps are the operators allowed inside a match value; anything
// else ($where, $expr, ...) is refused so a filter cannot run code.
var elemMatchOps = map[string]bool{
	"$eq": true, "$ne": true, "$gt": true, "$gte": true, "$lt": true, "$lte": true,
	"$in": true, "$nin": true, "$exists": true, "$regex": true, "$options": true,
}

func elemMatch(key string, m map[string]any) (bson.D, error) {
	out := bson.D{}
	for k, v := range m {
		if strings.HasPrefix(k, "$") {
			if !elemMatchOps[k] {
				return nil, errs.New(errs.DBQuery, "Query is invalid. (reason = operator %s is not allowed in match, key = %s)", k, key)
			}
		} else if err := checkPath("query.filter.value", k); err != nil {
			return nil, err
		}
		if sub, ok := v.(map[string]any); ok {
			d, err := elemMatch(key, sub)
			if err != nil {
				return nil, err
			}
			out = append(out, bson.E{Key: k, Value: d})
			continue
		}
		out = append(out, bson.E{Key: k, Value: v})
	}
	slices.SortFunc(out, func(a, b bson.E) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

func parseDatetime(v any) (time.Time, error) {
	s, ok := v.(string)
	if !ok {
		return time.Time{}, fmt.Errorf("not a string")
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02", "2006-01"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("bad time %q", s)
}

// maxTimediff bounds the offset of a timediff (about 290 years fit in a
// time.Duration; a century is plenty).
const maxTimediff = int64(100 * 366 * 24 * time.Hour)

var timediffRe = regexp.MustCompile(`^now(?:/([dwm]))?(?:\s*([+-])\s*(\d+)\s*([smhdw]))?$`)

// Timediff evaluates "now", "now/d", "now/w", "now/m", optionally followed
// by "+N<unit>" or "-N<unit>" (unit s, m, h, d, w), in UTC.
func Timediff(expr string, now time.Time) (time.Time, error) {
	m := timediffRe.FindStringSubmatch(strings.TrimSpace(expr))
	if m == nil {
		return time.Time{}, fmt.Errorf("timediff value %q is not like now/d - 7d", expr)
	}
	t := now.UTC()
	day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	switch m[1] {
	case "d":
		t = day
	case "w":
		t = day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7)) // Monday
	case "m":
		t = time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
	}
	if m[2] != "" {
		unit := map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour, "d": 24 * time.Hour, "w": 7 * 24 * time.Hour}[m[4]]
		n, err := strconv.ParseInt(m[3], 10, 64)
		if err != nil || n > maxTimediff/int64(unit) { // the duration would overflow and wrap around
			return time.Time{}, fmt.Errorf("timediff value %q is out of range", expr)
		}
		if m[2] == "-" {
			n = -n
		}
		t = t.Add(time.Duration(n) * unit)
	}
	return t, nil
}
