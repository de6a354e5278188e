package schema

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/lifecycle"
)

// JournalVersion is the version of the journal part this code reads and
// writes. Raise it when its tables change: a database of the old version
// then refuses to start.
const JournalVersion = 4

// ProjectionVersion is the version of this build's projection model, raised
// as JournalVersion is; a build made with -ldflags "-X
// github.com/waybill/waybill/schema.builtProjections=N" takes N instead,
// which is how the tests make a build of another model.
var ProjectionVersion = projectionVersion(builtProjections)

var builtProjections string

func projectionVersion(built string) int {
	if n, err := strconv.Atoi(built); err == nil {
		return n
	}
	return 11
}

// The SQLSTATEs of targets_admit's refusals: a claim of a target disabled,
// or given limits, since the configuration was read, one of a target whose health holds
// its deliveries, and one past the target's limits (the target's name is
// the error's detail).
const (
	CodeTargetDisabled = "WB001"
	CodeTargetHeld     = "WB002"
	CodeTargetLimited  = "WB004"
)

// CodeSourceNotHeld is source_pass_hole's refusal of a process that no
// longer holds the source's lease.
const CodeSourceNotHeld = "WB005"

// CodeProjectionsMoved refuses an append to the journal by a build whose
// projections version is not the database's (journal.Queue): after an
// online rebuild of another build switched the tables, the servers of the
// old build write nothing.
const CodeProjectionsMoved = "WB003"

// The parts, as recorded in schema_version.
const (
	PartJournal     = "journal"
	PartProjections = "projections"
	// PartTargets records that the targets' definitions were converted
	// to max_concurrent bounding the cluster (upgradeTargets); its
	// version is always 1.
	PartTargets = "targets"
)

// upgradeTargetsSQL converts the definitions saved by a build that read
// max_concurrent per process and filled in the kind's default (5 for
// http, 1 for file): that value is left out, so the target has no bound
// across the cluster and each process runs the same slots as before (an
// admin's explicit 5 was journaled the same way and cannot be told
// apart; it meant the same). Another value stays, and now bounds the
// cluster (docs/operations.md, "Upgrading to projections version 11").
const upgradeTargetsSQL = `UPDATE targets SET spec = spec - 'max_concurrent'
	WHERE spec->>'max_concurrent' = CASE spec->>'kind' WHEN 'http' THEN '5' WHEN 'file' THEN '1' END`

// upgradeTargets runs upgradeTargetsSQL once per database, in tx: in the
// transaction that makes the projections this build's (the online
// rebuild's switch, after which no server of an older build writes, or
// the offline rebuild), or at the first Ensure that finds them so (a
// new database, a reset).
func upgradeTargets(ctx context.Context, tx pgx.Tx) error {
	tag, err := tx.Exec(ctx, `INSERT INTO schema_version (part, version) VALUES ($1, 1) ON CONFLICT (part) DO NOTHING`, PartTargets)
	if err != nil {
		return fmt.Errorf("record the targets' upgrade: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, upgradeTargetsSQL); err != nil {
		return fmt.Errorf("upgrade the targets' max_concurrent: %w", err)
	}
	return nil
}

// VersionError says a part of the database was created by other code.
type VersionError struct {
	Part   string
	Stored int
	Code   int
}

func (e *VersionError) Error() string {
	if e.Part == PartProjections {
		return fmt.Sprintf("the projections are schema version %d and this build uses %d: run this build's `waybill rebuild --online` beside the running servers, or `waybill rebuild` with them stopped (both replay the journal)", e.Stored, e.Code)
	}
	return fmt.Sprintf("the journal is schema version %d and this build uses %d: this build cannot read it; run the build that wrote it", e.Stored, e.Code)
}

// versionDDL holds the parts' versions and the digest of the DDL that
// last ran whole (ddlDigest): a database whose digest is this build's
// needs no DDL, which Ensure then skips.
const versionDDL = `CREATE TABLE IF NOT EXISTS schema_version (
	part    text PRIMARY KEY,
	version int  NOT NULL
);
CREATE TABLE IF NOT EXISTS schema_digest (
	singleton bool PRIMARY KEY DEFAULT true CHECK (singleton),
	digest    text NOT NULL
)`

// journalDDL creates the journal. Its payload is json, the text as
// journal.Encode wrote it: appending only checks it, and reading sends it
// as it is, where jsonb is parsed into its own form on the way in and
// printed back on every read (the feed's groups, the history, the audit
// and the rebuild read each payload again). Fields stay reachable with
// -> and ->>. A journal created before holds jsonb, which every statement
// here reads and writes as well (docs/operations.md, "The journal's
// payload column").
const journalDDL = `

CREATE TABLE IF NOT EXISTS journal (
	position    bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	txid        xid8        NOT NULL DEFAULT pg_current_xact_id(),
	recorded_at timestamptz NOT NULL,
	stream      text        NOT NULL,
	version     int         NOT NULL,
	delivery_id uuid,
	target      text,
	kind        text        NOT NULL,
	actor       text        NOT NULL,
	old_state   text,
	new_state   text,
	payload     json        NOT NULL,
	CONSTRAINT journal_stream_version_key UNIQUE (stream, version)
);
CREATE INDEX IF NOT EXISTS journal_txid ON journal (txid, position);

CREATE OR REPLACE FUNCTION journal_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'the journal is append-only: % refused', TG_OP
		USING ERRCODE = 'restrict_violation';
END $$;
CREATE OR REPLACE TRIGGER journal_append_only BEFORE UPDATE ON journal
	FOR EACH ROW EXECUTE FUNCTION journal_refuse_change();
CREATE OR REPLACE TRIGGER journal_no_truncate BEFORE TRUNCATE ON journal
	FOR EACH STATEMENT EXECUTE FUNCTION journal_refuse_change();

-- Every command writes its events and its rows in one transaction, so a
-- process whose build's projections are not the database's is refused at
-- its append, at no round trip of its own (docs/operations.md, "Online
-- rebuild"): a build's append checks, in its own statement, the version
-- it names against schema_version, and calls journal_projections_moved,
-- which refuses it, only on a difference.
CREATE OR REPLACE FUNCTION journal_projections_moved(mine int) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
	theirs int;
BEGIN
	SELECT version INTO theirs FROM schema_version WHERE part = 'projections';
	RAISE EXCEPTION 'the projections are version %, this process''s build writes version %: it writes nothing until it is replaced by a build of version %', theirs, mine, theirs
		USING ERRCODE = 'WB003';
END $$;
-- The servers of earlier builds check in this trigger instead: each of
-- their sessions declares its build's version in the setting
-- waybill.projections. The WHEN leaves every other session's appends
-- without a call of the function, which cost a transaction of the drain
-- about 40 µs (docs/performance.md, "The projections' check in the
-- append").
CREATE OR REPLACE FUNCTION journal_check_projections() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	mine int := current_setting('waybill.projections')::int;
BEGIN
	IF (SELECT version FROM schema_version WHERE part = 'projections') IS DISTINCT FROM mine THEN
		PERFORM journal_projections_moved(mine);
	END IF;
	RETURN NULL;
END $$;
CREATE OR REPLACE TRIGGER journal_projections BEFORE INSERT ON journal
	FOR EACH STATEMENT WHEN (current_setting('waybill.projections', true) <> '')
	EXECUTE FUNCTION journal_check_projections();

-- The one exception, retention's (docs/retention.md): a DELETE stands only
-- when its transaction appended, before it, the retention.archived event
-- that records exactly what left (the number of events, of messages and of
-- retention's older records, the first and last position) and where it was
-- archived, and nothing of the config stream or of a bulk operation's
-- stream leaves. Checked once per statement, over the rows it deleted.
CREATE OR REPLACE FUNCTION journal_check_removal() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	n bigint;
	streams bigint;
	records bigint;
	lo bigint;
	hi bigint;
	kept boolean;
	ledger jsonb;
BEGIN
	SELECT count(*), count(DISTINCT stream) FILTER (WHERE stream <> 'retention'),
			count(*) FILTER (WHERE stream = 'retention'), min(position), max(position),
			coalesce(bool_or(stream = 'config' OR stream LIKE 'operation:%'), false)
		INTO n, streams, records, lo, hi, kept FROM removed;
	IF n = 0 THEN
		RETURN NULL;
	END IF;
	SELECT payload::jsonb INTO ledger FROM journal
		WHERE txid = pg_current_xact_id() AND kind = 'retention.archived'
		ORDER BY position DESC LIMIT 1;
	IF ledger IS NULL OR kept OR (ledger->>'events')::bigint <> n OR (ledger->>'messages')::bigint <> streams
			OR (ledger->>'records')::bigint <> records
			OR (ledger->>'first_position')::bigint <> lo OR (ledger->>'last_position')::bigint <> hi THEN
		RAISE EXCEPTION 'the journal is append-only: DELETE of % events refused, no retention.archived event of this transaction records them', n
			USING ERRCODE = 'restrict_violation';
	END IF;
	RETURN NULL;
END $$;
CREATE OR REPLACE TRIGGER journal_removal AFTER DELETE ON journal
	REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION journal_check_removal();

-- The id of this database's archive, drawn once by retention: the name of
-- its directory under archive_dir, so two databases never share files.
CREATE TABLE IF NOT EXISTS retention_archive (
	singleton bool PRIMARY KEY DEFAULT true CHECK (singleton),
	id        uuid NOT NULL
);

CREATE TABLE IF NOT EXISTS payloads (
	message_id uuid  PRIMARY KEY,
	body       bytea NOT NULL
);

-- What a target's transform made of a delivery, where it differs from the
-- message (the journal's shape, and the payload when it is another),
-- sent by every attempt. Kept beside the payloads, as the journal is the
-- truth of everything but the bodies.
CREATE TABLE IF NOT EXISTS delivery_shapes (
	delivery_id uuid  PRIMARY KEY,
	message_id  uuid  NOT NULL,
	shape       jsonb NOT NULL,
	body        bytea
);
CREATE INDEX IF NOT EXISTS delivery_shapes_message ON delivery_shapes (message_id);

-- spec is the whole lifecycle.Target as JSON, defaults filled.
CREATE TABLE IF NOT EXISTS targets (
	name       text        PRIMARY KEY,
	spec       jsonb       NOT NULL,
	created_at timestamptz NOT NULL,
	updated_at timestamptz NOT NULL
);

CREATE TABLE IF NOT EXISTS routes (
	id           uuid        PRIMARY KEY,
	source       text        NOT NULL,
	from_pattern text        NOT NULL,
	to_pattern   text        NOT NULL,
	target       text        NOT NULL REFERENCES targets (name),
	created_at   timestamptz NOT NULL,
	updated_at   timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS routes_target ON routes (target);
ALTER TABLE routes
	ADD COLUMN IF NOT EXISTS types  text[] NOT NULL DEFAULT '{}',
	ADD COLUMN IF NOT EXISTS filter text   NOT NULL DEFAULT '';

CREATE TABLE IF NOT EXISTS settings (
	singleton bool  PRIMARY KEY DEFAULT true CHECK (singleton),
	value     jsonb NOT NULL
);
`

// projectionTablesDDL creates the projection tables bare, without their
// keys and indexes, which projectionIndexesDDL adds: Ensure runs both, and
// a rebuild loads the rows in between, which is much faster than
// maintaining every index row by row. There is no foreign key from
// deliveries to messages: the projector writes both in one transaction and
// the audit checks them.
const projectionTablesDDL = `
CREATE TABLE IF NOT EXISTS messages (
	id              uuid        NOT NULL,
	version         int         NOT NULL,
	source          text        NOT NULL,
	from_party      text        NOT NULL,
	to_party        text        NOT NULL,
	content_type    text        NOT NULL,
	idempotency_key text,
	ordering_key    text,
	duplicate_key   text,
	possible_duplicate_of uuid,
	type            text,
	generation      int         NOT NULL DEFAULT 1,
	payload_size    bigint      NOT NULL,
	payload_sha256  text        NOT NULL,
	stage           text        NOT NULL,
	refusal         text,
	status          text        NOT NULL,
	error           text        NOT NULL,
	delivery_count  int         NOT NULL,
	created_at      timestamptz NOT NULL,
	updated_at      timestamptz NOT NULL,
	payload_expunged boolean     NOT NULL DEFAULT false,
	traceparent     text,
	tracestate      text,
	baggage         text,
	headers         jsonb
);

-- A command read the message at a version; finding it at another means a
-- concurrent writer won, so the transaction fails as a serialization failure
-- and the command reads again.
CREATE OR REPLACE FUNCTION projection_expect_rows(updated bigint, want int) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
	IF updated <> want THEN
		RAISE EXCEPTION '% of % messages are no longer at the version read', want - updated, want
			USING ERRCODE = 'serialization_failure';
	END IF;
END $$;

CREATE TABLE IF NOT EXISTS deliveries (
	id                   uuid        NOT NULL,
	message_id           uuid        NOT NULL,
	message_created_at   timestamptz NOT NULL,
	seq                  int         NOT NULL,
	version              int         NOT NULL,
	generation           int         NOT NULL DEFAULT 1,
	target               text        NOT NULL,
	lane_key             text,
	lane_seq             bigint      NOT NULL DEFAULT 0,
	lane_continue        bool        NOT NULL DEFAULT false,
	state                text        NOT NULL,
	attempts             int         NOT NULL,
	dispatch_count       int         NOT NULL,
	redeliveries         int         NOT NULL,
	redelivered_at       timestamptz,
	redelivered_attempts int         NOT NULL,
	next_due             timestamptz,
	claim_token          uuid,
	lease_end            timestamptz,
	last_error           text        NOT NULL,
	created_at           timestamptz NOT NULL,
	updated_at           timestamptz NOT NULL,
	finished_at          timestamptz,
	-- shaped: delivery_shapes holds what its target's transform made of
	-- it (or its cancel or failure), which its claims read; the others'
	-- claims read no shape.
	shaped               bool        NOT NULL DEFAULT false
);

-- The lanes of fifo targets that hold work: the delivery at the head (the
-- one a worker may take) and how many wait behind it, blocked. A lane with
-- no head and nothing waiting has no row. Kept by the projector from the
-- journal, like messages and deliveries.
CREATE TABLE IF NOT EXISTS lanes (
	target           text        NOT NULL,
	ordering_key     text        NOT NULL,
	last_seq         bigint      NOT NULL,
	head_delivery_id uuid,
	head_message_id  uuid,
	head_since       timestamptz,
	head_settled     bool        NOT NULL,
	waiting          bigint      NOT NULL,
	waiting_since    timestamptz,
	held             bool        NOT NULL
);

-- The bulk operations: what each does to which messages (the ids are in
-- its journal stream), where it stands and how far it has come. Kept by
-- the commands from the journal, like messages and deliveries.
CREATE TABLE IF NOT EXISTS operations (
	id          uuid        NOT NULL,
	version     int         NOT NULL,
	action      text        NOT NULL,
	filter      jsonb       NOT NULL,
	reason      text        NOT NULL,
	created_by  text        NOT NULL,
	state       text        NOT NULL,
	matched     int         NOT NULL,
	listed      int         NOT NULL,
	done        int         NOT NULL,
	refused     int         NOT NULL,
	error       text        NOT NULL,
	created_at  timestamptz NOT NULL,
	updated_at  timestamptz NOT NULL,
	finished_at timestamptz
);

-- The number of deliveries to each target in each state, and of messages in each status
-- and in each status by the hour (of UTC) they were created in, kept by
-- the projector so that no figure has to count the deliveries or the
-- messages. Each transaction adds its changes to the rows of one shard (its
-- backend's), so concurrent writers rarely wait for each other on a row; a
-- count is the sum over its shards. The keys are made with the tables: the
-- rebuild's upserts of the counts need them.
CREATE TABLE IF NOT EXISTS delivery_counts (
	target text   NOT NULL,
	shard  int    NOT NULL,
	state  text   NOT NULL,
	n      bigint NOT NULL,
	PRIMARY KEY (target, shard, state)
);
CREATE TABLE IF NOT EXISTS message_counts (
	shard  int    NOT NULL,
	status text   NOT NULL,
	n      bigint NOT NULL,
	PRIMARY KEY (shard, status)
);
-- The rows of status '' count the messages of their hour whatever their
-- status. /stats sums a range of the key for each status it reads.
CREATE TABLE IF NOT EXISTS message_hour_counts (
	status text        NOT NULL,
	hour   timestamptz NOT NULL,
	shard  int         NOT NULL,
	n      bigint      NOT NULL,
	PRIMARY KEY (status, hour, shard)
);
-- The outcomes of attempts by the minute (of UTC) they were recorded in:
-- by target, the state the outcome left the delivery in (delivered,
-- retrying, failed, awaiting_ack), the class of the answer's HTTP status
-- ('2xx' … '5xx', or 'none') and, for delivered, the bucket of the time
-- since the message's ingest (-1 for the others). The console's charts
-- read them. Sharded as the counts above; retention deletes the minutes
-- before a horizon and records it in delivery_minutes_kept, which no
-- rebuild drops: the counts below it are gone, and neither the rebuild
-- nor the audit writes or compares them.
CREATE TABLE IF NOT EXISTS delivery_minute_counts (
	target  text        NOT NULL,
	minute  timestamptz NOT NULL,
	outcome text        NOT NULL,
	class   text        NOT NULL,
	bucket  smallint    NOT NULL,
	shard   int         NOT NULL,
	n       bigint      NOT NULL,
	PRIMARY KEY (target, minute, outcome, class, bucket, shard)
);
CREATE TABLE IF NOT EXISTS delivery_minutes_kept (
	singleton boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
	since     timestamptz NOT NULL
);

-- A receiver's own id for a message names one delivery per target: the
-- newest hand-over that took it. consumed is set by the first final
-- receipt by the id, so a second one is refused.
-- A message's outcome callback, one row per message with a callback URL:
-- the state (a delivery's) of the call for its latest settlement, and what
-- the call says (the status, the time and the deliveries as it settled);
-- status, state and the rest are NULL until the first settlement.
CREATE TABLE IF NOT EXISTS callbacks (
	message_id  uuid        NOT NULL,
	url         text        NOT NULL,
	seq         int         NOT NULL,
	status      text,
	settled_at  timestamptz,
	deliveries  jsonb,
	state       text,
	attempts    int         NOT NULL,
	next_due    timestamptz,
	claim_token uuid,
	lease_end   timestamptz,
	last_error  text        NOT NULL,
	updated_at  timestamptz NOT NULL,
	finished_at timestamptz
);

CREATE TABLE IF NOT EXISTS correlations (
	target      text    NOT NULL,
	external_id text    NOT NULL,
	delivery_id uuid    NOT NULL,
	message_id  uuid    NOT NULL,
	consumed    boolean NOT NULL
);

-- A target's health: the fold of its health stream (version to
-- throttled_until), and beside it what is not journaled: the end of a
-- half-open breaker's probe, the window of outcomes the breaker counts and
-- since when every attempt failed. A target with no row is closed.
CREATE TABLE IF NOT EXISTS target_health (
	target          text        PRIMARY KEY,
	version         int         NOT NULL DEFAULT 0,
	breaker         text        NOT NULL DEFAULT 'closed',
	since           timestamptz,
	until           timestamptz,
	cooldown_ms     bigint      NOT NULL DEFAULT 0,
	throttled_until timestamptz,
	probe_until     timestamptz,
	window_start    timestamptz,
	window_requests int         NOT NULL DEFAULT 0,
	window_failures int         NOT NULL DEFAULT 0,
	failing_since   timestamptz
);
`

// projectionTables are the tables projectionTablesDDL creates that a
// rebuild replaces: all but delivery_minutes_kept, retention's horizon of
// the minute counts, which no rebuild drops.
var projectionTables = []string{"messages", "deliveries", "delivery_counts", "message_counts", "message_hour_counts",
	"delivery_minute_counts", "lanes", "callbacks", "correlations", "operations", "target_health"}

// ProjectionTables lists the tables of the projection group that a
// rebuild replaces; the backlog benchmark counts the rows written in them.
func ProjectionTables() []string { return slices.Clone(projectionTables) }

// projectionIndexesDDL adds the keys and indexes of the projection tables
// that are missing. The keys are constraints, which have no IF NOT EXISTS.
// The partial indexes hold the states of the lifecycle's rules their
// queries select by.
var projectionIndexesDDL = `
DO $$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_constraint WHERE conrelid = 'messages'::regclass AND conname = 'messages_pkey') THEN
		ALTER TABLE messages ADD CONSTRAINT messages_pkey PRIMARY KEY (id);
	END IF;
	IF NOT EXISTS (SELECT FROM pg_constraint WHERE conrelid = 'deliveries'::regclass AND conname = 'deliveries_pkey') THEN
		ALTER TABLE deliveries ADD CONSTRAINT deliveries_pkey PRIMARY KEY (id);
	END IF;
	IF NOT EXISTS (SELECT FROM pg_constraint WHERE conrelid = 'deliveries'::regclass AND conname = 'deliveries_message_seq') THEN
		ALTER TABLE deliveries ADD CONSTRAINT deliveries_message_seq UNIQUE (message_id, seq);
	END IF;
	IF NOT EXISTS (SELECT FROM pg_constraint WHERE conrelid = 'lanes'::regclass AND conname = 'lanes_pkey') THEN
		ALTER TABLE lanes ADD CONSTRAINT lanes_pkey PRIMARY KEY (target, ordering_key);
	END IF;
	IF NOT EXISTS (SELECT FROM pg_constraint WHERE conrelid = 'callbacks'::regclass AND conname = 'callbacks_pkey') THEN
		ALTER TABLE callbacks ADD CONSTRAINT callbacks_pkey PRIMARY KEY (message_id);
	END IF;
	IF NOT EXISTS (SELECT FROM pg_constraint WHERE conrelid = 'correlations'::regclass AND conname = 'correlations_pkey') THEN
		ALTER TABLE correlations ADD CONSTRAINT correlations_pkey PRIMARY KEY (target, external_id);
	END IF;
	IF NOT EXISTS (SELECT FROM pg_constraint WHERE conrelid = 'operations'::regclass AND conname = 'operations_pkey') THEN
		ALTER TABLE operations ADD CONSTRAINT operations_pkey PRIMARY KEY (id);
	END IF;
END $$;
-- A source's idempotency keys, each held by one message. Only messages
-- with a key are here: a keyless one writes no entry at its insert or at
-- its outcome, which is never HOT.
CREATE UNIQUE INDEX IF NOT EXISTS messages_source_idempotency_key ON messages (source, idempotency_key)
	WHERE idempotency_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS messages_created ON messages (created_at DESC, id DESC);
CREATE INDEX IF NOT EXISTS messages_status_created ON messages (status, created_at DESC, id DESC);
CREATE INDEX IF NOT EXISTS messages_source_created ON messages (source, created_at DESC, id DESC);
-- Retention's expunge takes, oldest first, the messages that still hold a
-- payload retention may drop. It holds no updated_at, which every event
-- changes, so message updates that keep the status stay HOT.
CREATE INDEX IF NOT EXISTS messages_payload_held ON messages (status, created_at, id)
	WHERE NOT payload_expunged AND ` + lifecycle.StatusesSQL("status", lifecycle.ExpungeStatuses()) + `;
CREATE INDEX IF NOT EXISTS messages_ordering_key_created ON messages (ordering_key, created_at DESC, id DESC)
	WHERE ordering_key IS NOT NULL;
-- The messages list's filters by type, party and idempotency key, each a
-- keyset walk newest first; the optional columns only where set.
CREATE INDEX IF NOT EXISTS messages_type_created ON messages (type, created_at DESC, id DESC)
	WHERE type IS NOT NULL;
CREATE INDEX IF NOT EXISTS messages_from_created ON messages (from_party, created_at DESC, id DESC);
CREATE INDEX IF NOT EXISTS messages_to_created ON messages (to_party, created_at DESC, id DESC);
CREATE INDEX IF NOT EXISTS messages_idempotency_key_created ON messages (idempotency_key, created_at DESC, id DESC)
	WHERE idempotency_key IS NOT NULL;
-- The latest earlier message of a source with a duplicate key, found at
-- ingest; and the possible duplicates, newest first.
CREATE INDEX IF NOT EXISTS messages_duplicate_key ON messages (source, duplicate_key, created_at DESC)
	WHERE duplicate_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS messages_possible_duplicate_created ON messages (created_at DESC, id DESC)
	WHERE possible_duplicate_of IS NOT NULL;
-- A lane's blocked deliveries in their order: the next one to unblock is the
-- first. It holds only blocked deliveries, so a long wait costs other lanes
-- nothing.
CREATE INDEX IF NOT EXISTS deliveries_lane ON deliveries (target, lane_key, lane_seq)
	WHERE ` + lifecycle.UnblockRule.StatesSQL("") + `;
-- The lanes with deliveries waiting, for the lanes list and the sweep.
CREATE INDEX IF NOT EXISTS lanes_waiting ON lanes (target, ordering_key) WHERE waiting > 0;
-- The operations list, newest first; the running ones, the one that has
-- waited longest first, for the runner.
CREATE INDEX IF NOT EXISTS operations_created ON operations (created_at DESC, id DESC);
CREATE INDEX IF NOT EXISTS operations_running ON operations (updated_at, id) WHERE state = 'running';
-- The dashboard's charts read the minutes of all targets from a time on.
CREATE INDEX IF NOT EXISTS delivery_minute_counts_minute ON delivery_minute_counts (minute);
CREATE INDEX IF NOT EXISTS deliveries_due ON deliveries (state, next_due) WHERE next_due IS NOT NULL;
-- The claims held: a target's attempts in flight, counted against its
-- max_concurrent, and the leases the sweep expires (its size is the
-- attempts in flight, which the sweep reads whole). A claim so writes one
-- entry for both (retiredIndexesDDL).
CREATE INDEX IF NOT EXISTS deliveries_in_flight ON deliveries (target, lease_end) WHERE ` + lifecycle.InFlightRule.StatesSQL("") + `;
-- A target's messages, newest first, for GET /messages?target=: one
-- delivery per message and target, in the messages' list order.
CREATE INDEX IF NOT EXISTS deliveries_target_message ON deliveries (target, message_created_at DESC, message_id DESC);
-- A target's faulted deliveries by their messages' creation, for its
-- figure of the last 24 hours: only failed and stalled ones are here.
CREATE INDEX IF NOT EXISTS deliveries_faulted ON deliveries (target, message_created_at)
	WHERE ` + lifecycle.StatusesSQL("state", lifecycle.StatesWhere(lifecycle.DeliveryState.Faulted)) + `;
-- A worker's catch-up takes its target's claimable deliveries oldest due
-- first: this index walks them in that order and holds only the states a
-- worker may take, so its size is the work in flight, not the history.
CREATE INDEX IF NOT EXISTS deliveries_claimable ON deliveries (target, (coalesce(next_due, lease_end, updated_at)))
	WHERE ` + lifecycle.CatchUpRule.StatesSQL("") + `;
-- The callback worker takes the due callbacks oldest first: only those
-- in a state it may take are here.
CREATE INDEX IF NOT EXISTS callbacks_due ON callbacks ((coalesce(next_due, lease_end)))
	WHERE ` + lifecycle.CallbackCatchUpRule.StatesSQL("") + `;

-- A target's attempts in flight at a time (lifecycle.InFlightRule), and
-- below the tokens of its bucket: this build's statements hold their
-- bodies (TargetInFlightSQL, TargetTokensSQL); the functions stay for
-- the statements of a build before, beside it during an upgrade.
CREATE OR REPLACE FUNCTION target_in_flight(name text, at timestamptz) RETURNS int
LANGUAGE sql STABLE AS $$
	SELECT ` + TargetInFlightSQL("target_in_flight.name", "target_in_flight.at") + `
$$;

-- The tokens of the bucket of a target with the definition spec at a time
-- (lifecycle.Rate.Tokens, target_buckets), NULL without a rate.
CREATE OR REPLACE FUNCTION target_tokens(spec jsonb, name text, at timestamptz) RETURNS float8
LANGUAGE sql STABLE AS $$
	SELECT ` + TargetTokensSQL("spec", "target_tokens.name", "target_tokens.at") + `
$$;

-- How many of want claims of a target its health (lifecycle.Gate) and its
-- limits (lifecycle.Target.LimitsAllowance) let through at a time, freeing
-- of its attempts in flight being ended by the same transaction; none
-- while it is disabled: a choice of claimable deliveries takes no more,
-- and the sweep wakes none of a target that lets none through. A target
-- without limits counts nothing.
DROP FUNCTION IF EXISTS target_allowance(text, timestamptz, int);
CREATE OR REPLACE FUNCTION target_allowance(name text, at timestamptz, want int, freeing int) RETURNS int
LANGUAGE sql STABLE AS $$
	SELECT ` + TargetAllowanceSQL("target_allowance.name", "target_allowance.at", "target_allowance.want", "target_allowance.freeing") + `
$$;

-- A transaction that writes claims calls this after taking its targets'
-- claim locks (ClassTarget: shared, alone for a target with limits as the
-- configuration it decided with showed them, alone[]) and writing the
-- projection, with the number of claims of each, the time and the latest
-- end of each target's claims' leases: a target disabled before then
-- fails it (WB001), as does one with limits whose lock was taken shared
-- (the configuration was older than the limits), and so do one whose
-- health lets fewer claims through (WB002, the
-- target in the detail) and one whose attempts in flight, these claims
-- among them, pass its max_concurrent, or whose bucket holds fewer tokens
-- than claims (WB004, the same detail); the commands then decide again on
-- what they read anew. A half-open breaker's probe is taken here, until
-- its lease's end, which names the probe to its outcome, so one process
-- alone makes it, and so are the claims' tokens. The commands call it
-- only when a target's rows give it something to do (commands'
-- targetAdmitSQL).
DROP FUNCTION IF EXISTS targets_admit(text[], int[], timestamptz, timestamptz);
DROP FUNCTION IF EXISTS targets_admit(text[], int[], timestamptz, timestamptz[]);
CREATE OR REPLACE FUNCTION targets_admit(names text[], counts int[], at timestamptz, lease_ends timestamptz[], alone bool[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	off text;
	h record;
	l record;
	tokens float8;
BEGIN
	SELECT name INTO off FROM targets WHERE name = ANY(names) AND spec->>'enabled' = 'false' LIMIT 1;
	IF off IS NOT NULL THEN
		RAISE EXCEPTION 'target % is disabled', off USING ERRCODE = '` + CodeTargetDisabled + `';
	END IF;
	FOR h IN SELECT x.name, x.n, x.lease_end, g.breaker, ` + lifecycle.GateAllowanceSQL("g", "at", "x.n") + ` AS allowed
		FROM unnest(names, counts, lease_ends) AS x(name, n, lease_end) JOIN target_health g ON g.target = x.name ORDER BY x.name LOOP
		IF h.allowed < h.n THEN
			RAISE EXCEPTION 'target % is held by its health', h.name USING ERRCODE = '` + CodeTargetHeld + `', DETAIL = h.name;
		END IF;
		IF h.breaker = 'half_open' THEN
			UPDATE target_health SET probe_until = h.lease_end
				WHERE target = h.name AND (probe_until IS NULL OR probe_until <= at);
			IF NOT FOUND THEN
				RAISE EXCEPTION 'target % is held by its health', h.name USING ERRCODE = '` + CodeTargetHeld + `', DETAIL = h.name;
			END IF;
		END IF;
	END LOOP;
	FOR l IN SELECT x.name, x.n, x.alone, t.spec FROM unnest(names, counts, alone) AS x(name, n, alone) JOIN targets t ON t.name = x.name
		WHERE ` + lifecycle.LimitedSQL("t.spec") + ` ORDER BY x.name LOOP
		IF NOT l.alone THEN
			RAISE EXCEPTION 'target % has limits its claims did not lock for', l.name USING ERRCODE = '` + CodeTargetDisabled + `';
		END IF;
		tokens := ` + TargetTokensSQL("l.spec", "l.name", "targets_admit.at") + `;
		IF ` + lifecycle.LimitsAllowanceSQL("l.spec", "("+TargetInFlightSQL("l.name", "targets_admit.at")+" - l.n)", "tokens", "l.n") + ` < l.n THEN
			RAISE EXCEPTION 'target % is at its limits', l.name USING ERRCODE = '` + CodeTargetLimited + `', DETAIL = l.name;
		END IF;
		IF tokens IS NOT NULL THEN
			INSERT INTO target_buckets AS b (target, tokens, at) VALUES (l.name, tokens - l.n, at)
				ON CONFLICT (target) DO UPDATE SET tokens = excluded.tokens, at = greatest(b.at, excluded.at);
		END IF;
	END LOOP;
END $$;
`

// TargetAllowanceSQL is the body of target_allowance as an expression
// over the SQL expressions name, at, want and freeing: the claim's choice
// of due deliveries writes it in its own statement, whose generic plan
// PostgreSQL keeps, where a call of the function (a SQL function with a
// FROM, never inlined) plans its body again at every call.
func TargetAllowanceSQL(name, at, want, freeing string) string {
	return allowanceSQL(name, at, want, `CASE WHEN `+lifecycle.LimitedSQL("t.spec")+` THEN `+lifecycle.LimitsAllowanceSQL("t.spec",
		"("+TargetInFlightSQL("t.name", at)+" - "+freeing+")", TargetTokensSQL("t.spec", "t.name", at), want)+` ELSE `+want+` END`)
}

// UnlimitedAllowanceSQL is TargetAllowanceSQL for a target that the
// Writer's configuration holds to have no limits: what its enabled flag
// and its health let through. PostgreSQL sets up every part of a plan at
// every execution, the limits' count of attempts in flight and bucket
// included, even where the target's definition skips them; the choice of
// such a target is a fifth cheaper without them. A target given limits
// since is caught by targets_admit, as its claims did not take its lock
// alone.
func UnlimitedAllowanceSQL(name, at, want string) string {
	return allowanceSQL(name, at, want, want)
}

// allowanceSQL is what the target name's enabled flag and health let
// through of want at at, and no more than limits.
func allowanceSQL(name, at, want, limits string) string {
	return `(SELECT CASE WHEN t.spec->>'enabled' = 'false' THEN 0
		ELSE least(coalesce((SELECT ` + lifecycle.GateAllowanceSQL("h", at, want) + `
			FROM target_health h WHERE h.target = ` + name + `), ` + want + `),
			` + limits + `) END
	FROM (SELECT) one LEFT JOIN targets t ON t.name = ` + name + `)`
}

// TargetInFlightSQL is the number of attempts of the target name in flight
// at the timestamptz at (lifecycle.InFlightRule), as an expression: a
// call of target_in_flight, a SQL function with a FROM that PostgreSQL
// never inlines, planned its body again at every call, in the choice of
// due deliveries and in targets_admit alike.
func TargetInFlightSQL(name, at string) string {
	return `(SELECT count(*)::int FROM deliveries d WHERE d.target = ` + name + ` AND ` + lifecycle.InFlightRule.SQL("d", at) + `)`
}

// TargetTokensSQL is the tokens of the bucket of the target name, of the
// stored definition spec, at the timestamptz at (lifecycle.Rate.Tokens,
// target_buckets), as an expression, NULL without a rate: for the same
// reason as TargetInFlightSQL.
func TargetTokensSQL(spec, name, at string) string {
	return `(SELECT ` + lifecycle.RateTokensSQL(spec, "b.tokens", "b.at", at) + `
		FROM (SELECT) one LEFT JOIN target_buckets b ON b.target = ` + name + `)`
}

// retiredIndexesDDL drops the indexes of projection tables that an
// earlier build of the same projections version made and this one does
// not: deliveries_lease, by lease_end alone, whose claims held
// deliveries_in_flight holds; and the constraint messages_idempotency_key,
// which held every message where messages_source_idempotency_key holds
// those with a key. Ensure runs it on the live tables, named in full,
// never as part of projectionIndexesDDL: the shadow's transaction, whose
// search path reaches the live tables, would drop them there and hold the
// live table for the whole build. The constraint is looked up first, as
// an ALTER TABLE locks the table even when there is nothing to drop.
const retiredIndexesDDL = `DROP INDEX IF EXISTS public.deliveries_lease;
DO $$
BEGIN
	IF EXISTS (SELECT FROM pg_constraint WHERE conrelid = 'public.messages'::regclass AND conname = 'messages_idempotency_key') THEN
		ALTER TABLE public.messages DROP CONSTRAINT messages_idempotency_key;
	END IF;
END $$`

// ddlDigest names this build's DDL and versions.
var ddlDigest = func() string {
	h := sha256.New()
	for _, ddl := range []string{versionDDL, journalDDL, alertsDDL, tokensDDL, sessionsDDL, sourcesDDL, keysDDL, limitsDDL,
		projectionTablesDDL, projectionIndexesDDL, retiredIndexesDDL} {
		h.Write([]byte(ddl))
		h.Write([]byte{0})
	}
	fmt.Fprintf(h, "%d %d", JournalVersion, ProjectionVersion)
	return hex.EncodeToString(h.Sum(nil))
}()

// Ensure creates whatever is missing and checks that the stored versions are
// this code's. It changes nothing else, so it is safe at every start.
//
// A database that this build's DDL ran on whole, and that no reset has
// touched since, is left alone: the DDL would take table locks (an index
// made if not there, a trigger replaced) that wait for every transaction
// writing the table and hold up every one that comes after, so a server's
// start or an audit beside running servers would stall their writes.
func Ensure(ctx context.Context, db *pgxpool.Pool) error {
	if upToDate(ctx, db) {
		return nil
	}
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(KeyEnsure)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, versionDDL); err != nil {
			return fmt.Errorf("create schema_version: %w", err)
		}
		if err := refuseResetBesideJournal(ctx, tx); err != nil {
			return err
		}
		// Versions first: DDL of this build may not apply to tables of another.
		if err := errors.Join(
			checkVersion(ctx, tx, PartJournal, JournalVersion),
			checkVersion(ctx, tx, PartProjections, ProjectionVersion)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, journalDDL); err != nil {
			return fmt.Errorf("create journal tables: %w", err)
		}
		if _, err := tx.Exec(ctx, alertsDDL); err != nil {
			return fmt.Errorf("create alerts table: %w", err)
		}
		if _, err := tx.Exec(ctx, tokensDDL); err != nil {
			return fmt.Errorf("create tokens table: %w", err)
		}
		if _, err := tx.Exec(ctx, sessionsDDL); err != nil {
			return fmt.Errorf("create console sessions table: %w", err)
		}
		if _, err := tx.Exec(ctx, sourcesDDL); err != nil {
			return fmt.Errorf("create sources tables: %w", err)
		}
		if _, err := tx.Exec(ctx, keysDDL); err != nil {
			return fmt.Errorf("create signing keys tables: %w", err)
		}
		if _, err := tx.Exec(ctx, limitsDDL); err != nil {
			return fmt.Errorf("create target buckets table: %w", err)
		}
		if err := upgradeTargets(ctx, tx); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, projectionTablesDDL); err != nil {
			return fmt.Errorf("create projection tables: %w", err)
		}
		if _, err := tx.Exec(ctx, projectionIndexesDDL); err != nil {
			return fmt.Errorf("create projection indexes: %w", err)
		}
		if _, err := tx.Exec(ctx, retiredIndexesDDL); err != nil {
			return fmt.Errorf("drop retired projection indexes: %w", err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_digest (digest) VALUES ($1)
			ON CONFLICT (singleton) DO UPDATE SET digest = excluded.digest`, ddlDigest); err != nil {
			return fmt.Errorf("record schema digest: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("ensure schema: %w", err)
	}
	return nil
}

// upToDate says whether this build's DDL ran whole on the database and
// both parts are of this build's versions, reading only: any doubt (a
// table missing, a part reset) says no.
func upToDate(ctx context.Context, db *pgxpool.Pool) bool {
	var digest string
	var journal, projections int
	err := db.QueryRow(ctx, `SELECT d.digest,
			(SELECT version FROM schema_version WHERE part = $1),
			(SELECT version FROM schema_version WHERE part = $2)
		FROM schema_digest d`, PartJournal, PartProjections).Scan(&digest, &journal, &projections)
	return err == nil && digest == ddlDigest && journal == JournalVersion && projections == ProjectionVersion
}

// StoredVersion reads the version the database records for a part
// (PartJournal, PartProjections); pgx.ErrNoRows when it records none.
func StoredVersion(ctx context.Context, db *pgxpool.Pool, part string) (int, error) {
	var stored int
	err := db.QueryRow(ctx, `SELECT version FROM schema_version WHERE part = $1`, part).Scan(&stored)
	if err != nil {
		return 0, fmt.Errorf("read %s schema version: %w", part, err)
	}
	return stored, nil
}

func checkVersion(ctx context.Context, tx pgx.Tx, part string, code int) error {
	var stored int
	// A part with no row is new here (or was reset): it takes this code's version.
	err := tx.QueryRow(ctx, `INSERT INTO schema_version (part, version) VALUES ($1, $2)
		ON CONFLICT (part) DO UPDATE SET part = excluded.part RETURNING version`, part, code).Scan(&stored)
	if err != nil {
		return fmt.Errorf("read %s schema version: %w", part, err)
	}
	if stored != code {
		return &VersionError{Part: part, Stored: stored, Code: code}
	}
	return nil
}

// RecreateProjections replaces the projection tables in one transaction:
// it drops them, creates them bare, calls load to fill them (with COPY
// FREEZE, as the tables are new in the transaction), adds their keys and
// indexes and records their version. Until it commits, everyone else sees
// the old tables; if it fails, they stay. The journal must be of this
// code's version.
func RecreateProjections(ctx context.Context, db *pgxpool.Pool, load func(pgx.Tx) error) error {
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(KeyEnsure)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, versionDDL); err != nil {
			return fmt.Errorf("create schema_version: %w", err)
		}
		if err := checkVersion(ctx, tx, PartJournal, JournalVersion); err != nil {
			return err
		}
		// The functions read target_buckets, which a database of an
		// older build lacks.
		if _, err := tx.Exec(ctx, limitsDDL); err != nil {
			return fmt.Errorf("create target buckets table: %w", err)
		}
		if err := upgradeTargets(ctx, tx); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DROP TABLE IF EXISTS `+strings.Join(projectionTables, ", ")+`;
			DELETE FROM schema_version WHERE part = 'projections';
			DELETE FROM schema_digest`); err != nil {
			return fmt.Errorf("drop projection tables: %w", err)
		}
		if _, err := tx.Exec(ctx, projectionTablesDDL); err != nil {
			return fmt.Errorf("create projection tables: %w", err)
		}
		if err := load(tx); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, projectionIndexesDDL); err != nil {
			return fmt.Errorf("create projection indexes: %w", err)
		}
		return checkVersion(ctx, tx, PartProjections, ProjectionVersion)
	})
	if err != nil {
		return fmt.Errorf("recreate projections: %w", err)
	}
	return nil
}

// ErrProjectionsReset is Ensure's refusal to make the projection tables
// anew, empty, beside a journal that holds events: the projections were
// reset and not rebuilt. Served, empty tables would lose every message to
// the API and the workers, and would take a sender's retry, or a source's
// file or row read again, as new, under a key that has its message.
var ErrProjectionsReset = errors.New("the projections were reset and not rebuilt")

// refuseResetBesideJournal returns ErrProjectionsReset when the database
// records no projections' version (new, or reset) while its journal holds
// an event: only a rebuild may make those tables.
func refuseResetBesideJournal(ctx context.Context, tx pgx.Tx) error {
	var missing bool
	err := tx.QueryRow(ctx, `SELECT NOT EXISTS (SELECT FROM schema_version WHERE part = $1)
		AND to_regclass('journal') IS NOT NULL`, PartProjections).Scan(&missing)
	if err == nil && missing {
		// A statement of its own: the journal may not exist when the first
		// is planned.
		err = tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM journal)`).Scan(&missing)
	}
	if err != nil {
		return fmt.Errorf("read the projections' state: %w", err)
	}
	if missing {
		return fmt.Errorf("%w: the journal holds events, so run `waybill rebuild` (with no server running) before anything else", ErrProjectionsReset)
	}
	return nil
}

// ResetProjections drops the projection tables and forgets their
// version; the journal, the payloads and the configuration stay. Until a
// rebuild fills them, Ensure refuses (ErrProjectionsReset) when the
// journal holds an event, so no server starts on them.
func ResetProjections(ctx context.Context, db *pgxpool.Pool) error {
	_, err := db.Exec(ctx, `DROP TABLE IF EXISTS `+strings.Join(projectionTables, ", ")+`;
		`+versionDDL+`;
		DELETE FROM schema_version WHERE part = 'projections';
		DELETE FROM schema_digest`)
	if err != nil {
		return fmt.Errorf("reset projections: %w", err)
	}
	return nil
}
