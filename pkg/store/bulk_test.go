package store_test

import (
	"errors"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/store"
)

func TestWriteErrors(t *testing.T) {
	t.Parallel()
	dup := mongo.WriteError{Index: 1, Code: 11000, Message: "E11000 duplicate key"}
	lost := errors.New("connection lost")
	for _, tc := range []struct {
		name string
		err  error
		want []bool // refused
	}{
		{"all written", nil, []bool{false, false, false}},
		{"one refused", mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{{WriteError: dup}}}, []bool{false, true, false}},
		{"index out of range ignored", mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{{WriteError: mongo.WriteError{Index: 7, Code: 11000}}}}, []bool{false, false, false}},
		{"write concern: unknown", mongo.BulkWriteException{WriteConcernError: &mongo.WriteConcernError{Code: 64}}, []bool{true, true, true}},
		{"write concern beside a duplicate: unknown, no duplicate", mongo.BulkWriteException{WriteConcernError: &mongo.WriteConcernError{Code: 64},
			WriteErrors: []mongo.BulkWriteError{{WriteError: dup}}}, []bool{true, true, true}},
		{"not per document: unknown", lost, []bool{true, true, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := store.WriteErrors(tc.err, 3)
			for i, e := range got {
				if (e != nil) != tc.want[i] {
					t.Fatalf("document %d: %v, want refused %v", i, e, tc.want[i])
				}
			}
			if tc.name == "one refused" && !mongo.IsDuplicateKeyError(got[1]) {
				t.Fatalf("the refusal is not a duplicate key: %v", got[1])
			}
			if strings.HasPrefix(tc.name, "write concern") {
				for i, e := range got {
					if mongo.IsDuplicateKeyError(e) {
						t.Fatalf("document %d of an unknown outcome reads as a duplicate key: %v", i, e)
					}
				}
			}
		})
	}
}
