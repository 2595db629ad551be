package stat

import (
	"slices"

	"github.com/nubes-io/nubes/pkg/query"
)

// Paths calls fn with every stored path the query reads: filters,
// distinct, and the stages up to the first that builds new rows (group,
// project, count), whose own reads count too. It reports whether such a
// stage exists; without one the rows would be whole documents.
func (q *Query) Paths(fn func(at string, p *string) error) (reshaped bool, err error) {
	for _, group := range []struct {
		at   string
		list []query.Condition
	}{{"query.filter.key", q.Filter}, {"query.filter_or.key", q.FilterOr}} {
		for i := range group.list {
			if err := fn(group.at, &group.list[i].Key); err != nil {
				return false, err
			}
		}
	}
	if q.Distinct != "" {
		if err := fn("query.distinct", &q.Distinct); err != nil {
			return false, err
		}
	}
	for i := range q.Aggregate {
		st := &q.Aggregate[i]
		var paths []*string
		var at string
		switch {
		case st.Group != nil:
			at = "query.aggregate.group"
			for j := range st.Group.Keys {
				paths = append(paths, &st.Group.Keys[j].Key)
			}
			for j := range st.Group.Fields {
				f := &st.Group.Fields[j]
				paths = append(paths, &f.Key)
				for k := range f.Fields {
					paths = append(paths, &f.Fields[k].Key)
				}
				for k := range f.Conditions {
					paths = append(paths, &f.Conditions[k].Key)
				}
			}
			reshaped = true
		case st.Project != nil:
			at = "query.aggregate.project"
			for j := range st.Project.Fields {
				paths = append(paths, &st.Project.Fields[j].Key)
				paths = operandPaths(st.Project.Fields[j].Fields, paths)
			}
			reshaped = true
		case st.Count != nil:
			reshaped = true
		case st.Unwind != nil:
			at = "query.aggregate.unwind"
			paths = append(paths, &st.Unwind.Path)
			for j := range st.Unwind.Filter {
				paths = append(paths, &st.Unwind.Filter[j].Key)
			}
		case st.Sort != nil:
			at = "query.aggregate.sort"
			for j := range *st.Sort {
				paths = append(paths, &(*st.Sort)[j].Key)
			}
		}
		for _, p := range paths {
			if err := fn(at+".key", p); err != nil {
				return false, err
			}
		}
		if reshaped {
			return true, nil
		}
	}
	return false, nil
}

func operandPaths(ops []Operand, paths []*string) []*string {
	for i := range ops {
		if ops[i].Key != "" {
			paths = append(paths, &ops[i].Key)
		}
		paths = operandPaths(ops[i].Fields, paths)
	}
	return paths
}

// clone copies q deep enough that Paths may rewrite the copy.
func (q *Query) clone() *Query {
	c := *q
	c.Filter, c.FilterOr = slices.Clone(q.Filter), slices.Clone(q.FilterOr)
	c.Aggregate = make([]Stage, len(q.Aggregate))
	for i, st := range q.Aggregate {
		if st.Group != nil {
			g := Group{Keys: slices.Clone(st.Group.Keys), Fields: slices.Clone(st.Group.Fields)}
			for j := range g.Fields {
				g.Fields[j].Fields = slices.Clone(g.Fields[j].Fields)
				g.Fields[j].Conditions = slices.Clone(g.Fields[j].Conditions)
			}
			st.Group = &g
		}
		if st.Project != nil {
			p := Project{Fields: slices.Clone(st.Project.Fields), ExcludeKeys: st.Project.ExcludeKeys}
			for j := range p.Fields {
				p.Fields[j].Fields = cloneOperands(p.Fields[j].Fields)
			}
			st.Project = &p
		}
		if st.Unwind != nil {
			u := Unwind{Path: st.Unwind.Path, Filter: slices.Clone(st.Unwind.Filter)}
			st.Unwind = &u
		}
		if st.Sort != nil {
			s := slices.Clone(*st.Sort)
			st.Sort = &s
		}
		c.Aggregate[i] = st
	}
	return &c
}

func cloneOperands(ops []Operand) []Operand {
	out := slices.Clone(ops)
	for i := range out {
		out[i].Fields = cloneOperands(out[i].Fields)
	}
	return out
}
