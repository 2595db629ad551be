package store

import (
	"errors"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// WriteErrors spreads the error of a write of n documents in one
// command (InsertMany, BulkWrite, unordered) over them: nil for each
// written, its own write error for each refused; err itself for every
// one when it is not an answer per document (the connection lost, a
// write concern error), since which were written is then unknown. A
// write concern error is given as itself, not as the exception that
// carries it: that exception's write errors would make every document
// read as refused for a duplicate key (mongo.IsDuplicateKeyError).
func WriteErrors(err error, n int) []error {
	out := make([]error, n)
	if err == nil {
		return out
	}
	var bulk mongo.BulkWriteException
	if !errors.As(err, &bulk) || bulk.WriteConcernError != nil {
		unknown := err
		if bulk.WriteConcernError != nil {
			unknown = bulk.WriteConcernError
		}
		for i := range out {
			out[i] = unknown
		}
		return out
	}
	for _, we := range bulk.WriteErrors {
		if we.Index >= 0 && we.Index < n {
			out[we.Index] = we
		}
	}
	return out
}
