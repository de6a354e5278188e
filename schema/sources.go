package schema

// sourcesDDL is the sources' tables, in the journal part. sources is their
// configuration, written with the config stream's events as targets is.
// source_state is what the journal does not hold of a running source:
// which process polls it and until when (the lease), the watermark of an
// inbox_table source (every id up to it was taken or passed as a hole),
// and what its last poll found. inbox_markers lists the rows whose
// processed marker is owed to the inbox: a row's entry is inserted in the
// transaction that stores its message and deleted once the marker is
// written, so a crash between the two repeats the marker, never the
// message.
const sourcesDDL = `
CREATE TABLE IF NOT EXISTS sources (
	name       text        PRIMARY KEY,
	spec       jsonb       NOT NULL,
	created_at timestamptz NOT NULL,
	updated_at timestamptz NOT NULL
);

CREATE TABLE IF NOT EXISTS source_state (
	name          text        PRIMARY KEY,
	holder        text,
	lease_end     timestamptz,
	watermark     bigint      NOT NULL DEFAULT 0,
	last_poll_at  timestamptz,
	last_error    text,
	last_error_at timestamptz,
	backlog       bigint      NOT NULL DEFAULT 0
);

CREATE TABLE IF NOT EXISTS inbox_markers (
	source     text        NOT NULL,
	row_id     bigint      NOT NULL,
	message_id uuid        NOT NULL,
	owed_since timestamptz NOT NULL,
	next_try   timestamptz NOT NULL,
	tries      int         NOT NULL DEFAULT 0,
	last_error text,
	PRIMARY KEY (source, row_id)
);

-- An inbox's hole is passed only by the process that holds the source:
-- one whose lease another took over may have found a row of the hole
-- taken meanwhile. The update locks the state row, as the lease's take
-- does, so the two go one after the other.
CREATE OR REPLACE FUNCTION source_pass_hole(source text, by_holder text, mark bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
	UPDATE source_state SET watermark = greatest(watermark, mark) WHERE name = source AND holder = by_holder;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'source % is not held by %: another process polls it now', source, by_holder
			USING ERRCODE = '` + CodeSourceNotHeld + `';
	END IF;
END $$;
`
