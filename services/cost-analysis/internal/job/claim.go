package job

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
)

// A data source runs one job at a time: its document names the running
// job (running_job), set by a compare-and-set that only an unclaimed,
// live data source takes, and cleared by the write that finishes the job
// (change) or, when that clear was lost, by the next start that finds the
// named job finished. One document, so MongoDB's promise is all it needs.

// startingGrace is how long a claim whose job is not stored yet counts as
// held: the job is inserted right after the claim, so only a start that
// died in between leaves such a claim, and it frees it after this.
const startingGrace = time.Minute

// claimSource makes jobID the data source's running job, or refuses:
// 409 ERROR_DUPLICATE_JOB while another job runs, 404 when the data
// source is gone or its deregister has begun.
func (js *Jobs) claimSource(ctx context.Context, dataSourceID, jobID string) error {
	for try := range claimTries {
		if err := store.Pause(ctx, try); err != nil {
			return err
		}
		res, err := js.sources.UpdateOne(ctx, bson.D{{Key: "_id", Value: dataSourceID}, {Key: tenancy.MarkField, Value: bson.D{{Key: "$ne", Value: true}}},
			{Key: "running_job", Value: nil}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "running_job", Value: jobID}, {Key: "running_since", Value: time.Now().UTC()}}}})
		if err != nil {
			return store.Wrap(err)
		}
		if res.MatchedCount == 1 {
			return nil
		}
		var cur struct {
			Deleting     bool      `bson:"deleting"`
			RunningJob   string    `bson:"running_job"`
			RunningSince time.Time `bson:"running_since"`
		}
		err = js.sources.FindOne(ctx, bson.D{{Key: "_id", Value: dataSourceID}}).Decode(&cur)
		if errors.Is(err, mongo.ErrNoDocuments) || (err == nil && cur.Deleting) {
			return errs.NotFound("data_source_id", dataSourceID)
		}
		if err != nil {
			return store.Wrap(err)
		}
		if cur.RunningJob == "" {
			continue // cleared meanwhile
		}
		done, err := js.Expire(ctx, cur.RunningJob)
		if errs.Is(err, errs.NotFoundCode) {
			// Claimed, not stored: a start in progress, or one that died.
			done, err = time.Since(cur.RunningSince) >= startingGrace, nil
		}
		if err != nil {
			return err
		}
		if !done {
			return errs.New(errs.DuplicateJob, "A job of the data source is running. (data_source_id = %s, job_id = %s)", dataSourceID, cur.RunningJob)
		}
		if err := js.releaseSource(ctx, dataSourceID, cur.RunningJob); err != nil {
			return err
		}
	}
	return errs.Down("the data source "+dataSourceID, store.ErrConflict)
}

// claimTries bounds claimSource's rounds: each lost one means another
// start or finish changed the claim in between.
const claimTries = 6

// releaseSource clears the data source's running job if it is still
// jobID (a later job's claim stays).
func (js *Jobs) releaseSource(ctx context.Context, dataSourceID, jobID string) error {
	_, err := js.sources.UpdateOne(ctx, bson.D{{Key: "_id", Value: dataSourceID}, {Key: "running_job", Value: jobID}},
		bson.D{{Key: "$unset", Value: bson.D{{Key: "running_job", Value: ""}, {Key: "running_since", Value: ""}}}})
	return store.Wrap(err)
}

// sourceLive reports whether the data source is there and not being
// deregistered.
func (js *Jobs) sourceLive(ctx context.Context, dataSourceID string) (bool, error) {
	n, err := js.sources.CountDocuments(ctx, bson.D{{Key: "_id", Value: dataSourceID}, {Key: tenancy.MarkField, Value: bson.D{{Key: "$ne", Value: true}}}})
	return n == 1, store.Wrap(err)
}
