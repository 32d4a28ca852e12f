package fleet

import kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"

// Store keeps registrations across restarts. Put and Delete return after
// the change is durable (written and synced): the call that made the
// change returns only then. A store shared by replicas refuses, on Put, an
// id another replica holds with an error wrapping ErrRegistered.
type Store interface {
	Put(w *kvrouterv1.Worker, source Source) error
	Delete(id string) error
}

// Replacer is a Store that can also overwrite a registration whatever
// holds it, for Upsert's replacements. A Store without it gets Put.
type Replacer interface {
	Replace(w *kvrouterv1.Worker, source Source) error
}
