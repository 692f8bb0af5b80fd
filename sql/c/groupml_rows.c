/*
 * groupml_rows.c: the row buffers of groupml.learn_over_groups.
 *
 * The aggregate's transition function (_learn_step) runs once per input row, so it is C: it
 * appends the row to its group's buffer and returns the buffer's handle (a bigint, the
 * aggregate state).  It only buffers: it checks no user input and raises no error for it.
 * What would be an error (an empty features array, one of another length than the group's
 * first, a nested one) is recorded as the buffer's anomaly and appending stops; the Python
 * final function (_learn_final) raises it, and validates the model, search and options.
 *
 * A buffer holds its rows packed as native float8: d features, then the label (a boolean
 * label as 0/1), in one block that doubles as it grows.  Rows with a NULL label, NULL
 * features or a NULL element are counted as skipped.  The first row's model, search and
 * options are kept with the buffer.
 *
 * Memory: the buffers live in a context of this backend under TopTransactionContext (freed
 * at commit or abort), not in the aggregate's context, whose size HashAggregate weighs
 * against work_mem.  A reset callback on the aggregate's context frees a buffer when that
 * context is reset (GroupAggregate: after each group's final call) or deleted (the end of
 * the statement, an error, a closed cursor).  A backend-local hash table maps handles to
 * buffers; it goes with the context, and callbacks of an earlier transaction do nothing.
 *
 * _learn_rows(handle) returns a buffer's packed rows; _learn_buffers() lists the live buffers.
 *
 * train_groups' load (_pack_values, _pack_rows) buffers rows the same way without a model, and
 * its final function (_pack_shared) writes each group's rows into the transaction's load arena,
 * a memory file (memfd), returning where: {fd, offset, bytes}.  The PL/Python caller duplicates
 * the descriptor before the transaction ends and hands it to its helper processes, which map
 * the rows read-only: a group's rows are copied once after the scan, not through a bytea, an
 * SPI tuple, a Python bytes object and a pipe.  The arena's descriptor closes with the
 * transaction; the memory goes when the last duplicate closes.  _pack_read(ref) reads a range
 * back as bytea (within the loading transaction).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE				/* memfd_create */
#endif
#include "postgres.h"

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "access/xact.h"
#include "executor/spi.h"
#include "nodes/execnodes.h"

PG_MODULE_MAGIC;

typedef enum Anomaly
{
	ANOMALY_NONE = 0,
	ANOMALY_EMPTY,				/* the group's first array is empty */
	ANOMALY_LENGTH,				/* an array's length differs from the group's first */
	ANOMALY_NESTED				/* an array of more than one dimension */
} Anomaly;

static const char *const anomaly_names[] = {NULL, "empty", "length", "nested"};

typedef struct RowBuffer
{
	int64		handle;			/* hash key */
	int32		d;				/* features per row; 0 until the first row with features */
	Anomaly		anomaly;
	int32		found;			/* ANOMALY_LENGTH: the length found */
	int64		n_rows;			/* rows appended */
	int64		skipped;		/* rows with a NULL label, NULL features or a NULL element */
	double	   *data;			/* n_rows * (d + 1) values */
	Size		capacity;		/* values allocated */
	TimestampTz stmt;			/* start of the statement that created it */
	char	   *model;			/* the first row's model (NULL: SQL NULL) */
	Jsonb	   *search;
	Jsonb	   *options;
} RowBuffer;

/* frees a buffer when the aggregate's context that owns it is reset or deleted */
typedef struct OwnerHook
{
	MemoryContextCallback cb;
	int64		handle;
	uint64		generation;
} OwnerHook;

/* per call site of _learn_step */
typedef struct StepInfo
{
	bool		bool_label;
	FmgrInfo	model_out;		/* the model argument's output function */
} StepInfo;

static MemoryContext rows_context = NULL;
static HTAB *registry = NULL;
static RowBuffer *last_buffer = NULL;	/* the buffer of the previous row */
static uint64 generation = 0;	/* which rows_context the hooks belong to */
static int64 next_handle = 0;	/* handles are never reused in a backend */
static int	arena_fd = -1;		/* the transaction's load arena (memfd), or -1 */
static off_t arena_end = 0;		/* bytes written to it */

/*
 * Helper processes start while the scan goes on: once a statement's hashed aggregate has
 * buffered PRESTART_ROWS rows, the step calls groupml._learn_prestart(handle) (PL/Python)
 * once, which spawns them for the statement's first final call. Without it they could start
 * only at that call, after the whole scan.
 */
#define PRESTART_ROWS 20000
static TimestampTz prestart_stmt = 0;	/* the statement whose rows are counted */
static int64 prestart_rows = 0;
static bool prestart_done = false;

static void
maybe_prestart(FunctionCallInfo fcinfo, RowBuffer *buf)
{
	AggState   *agg;

	if (buf->stmt != prestart_stmt)
	{
		prestart_stmt = buf->stmt;
		prestart_rows = 0;
		prestart_done = false;
	}
	if (prestart_done || ++prestart_rows < PRESTART_ROWS)
		return;
	prestart_done = true;
	/* train_groups' packing (_pack_rows: no model) trains nothing in the aggregate */
	if (buf->model == NULL)
		return;
	/* a sorted aggregate finishes each group before the next starts: nothing to train ahead */
	if (fcinfo->context == NULL || !IsA(fcinfo->context, AggState))
		return;
	agg = (AggState *) fcinfo->context;
	if (agg->aggstrategy != AGG_HASHED && agg->aggstrategy != AGG_MIXED)
		return;
	{
		Oid			argtypes[1] = {INT8OID};
		Datum		values[1] = {Int64GetDatum(buf->handle)};

		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "groupml._learn_step: SPI_connect failed");
		SPI_execute_with_args("SELECT groupml._learn_prestart($1)", 1, argtypes, values, NULL, false, 0);
		SPI_finish();
	}
}

static void
registry_gone(void *arg)
{
	if (arena_fd >= 0)
		close(arena_fd);
	arena_fd = -1;
	arena_end = 0;
	rows_context = NULL;
	registry = NULL;
	last_buffer = NULL;
	generation++;
}

static void
ensure_registry(void)
{
	HASHCTL		ctl;
	MemoryContextCallback *cb;

	if (registry != NULL)
		return;
	rows_context = AllocSetContextCreate(TopTransactionContext, "groupml learn_over_groups rows",
										 ALLOCSET_DEFAULT_SIZES);
	ctl.keysize = sizeof(int64);
	ctl.entrysize = sizeof(RowBuffer);
	ctl.hcxt = rows_context;
	registry = hash_create("groupml learn_over_groups buffers", 64, &ctl,
						   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	cb = MemoryContextAlloc(rows_context, sizeof(MemoryContextCallback));
	cb->func = registry_gone;
	cb->arg = NULL;
	MemoryContextRegisterResetCallback(rows_context, cb);
}

static RowBuffer *
find_buffer(int64 handle)
{
	if (last_buffer != NULL && last_buffer->handle == handle)
		return last_buffer;
	if (registry == NULL)
		return NULL;
	return (RowBuffer *) hash_search(registry, &handle, HASH_FIND, NULL);
}

static void
free_buffer(int64 handle)
{
	RowBuffer  *buf = find_buffer(handle);

	if (buf == NULL)
		return;
	if (buf->data)
		pfree(buf->data);
	if (buf->model)
		pfree(buf->model);
	if (buf->search)
		pfree(buf->search);
	if (buf->options)
		pfree(buf->options);
	if (last_buffer == buf)
		last_buffer = NULL;
	hash_search(registry, &handle, HASH_REMOVE, NULL);
}

static void
owner_gone(void *arg)
{
	OwnerHook  *hook = (OwnerHook *) arg;

	if (hook->generation == generation && registry != NULL)
		free_buffer(hook->handle);
}

static Jsonb *
copy_jsonb(FunctionCallInfo fcinfo, int argno)
{
	Jsonb	   *j;
	Jsonb	   *copy;

	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return NULL;
	j = PG_GETARG_JSONB_P(argno);
	copy = MemoryContextAlloc(rows_context, VARSIZE(j));
	memcpy(copy, j, VARSIZE(j));
	return copy;
}

static RowBuffer *
new_buffer(FunctionCallInfo fcinfo, StepInfo *info, bool with_model)
{
	MemoryContext owner = NULL;
	RowBuffer  *buf;
	int64		handle = ++next_handle;
	bool		found;

	ensure_registry();
	buf = (RowBuffer *) hash_search(registry, &handle, HASH_ENTER, &found);
	buf->d = 0;
	buf->anomaly = ANOMALY_NONE;
	buf->found = 0;
	buf->n_rows = 0;
	buf->skipped = 0;
	buf->data = NULL;
	buf->capacity = 0;
	buf->stmt = GetCurrentStatementStartTimestamp();
	buf->model = NULL;
	buf->search = NULL;
	buf->options = NULL;
	if (with_model)
	{
		if (PG_NARGS() > 3 && !PG_ARGISNULL(3))
			buf->model = MemoryContextStrdup(rows_context,
											 OutputFunctionCall(&info->model_out, PG_GETARG_DATUM(3)));
		buf->search = copy_jsonb(fcinfo, 4);
		buf->options = copy_jsonb(fcinfo, 5);
	}

	if (AggCheckCallContext(fcinfo, &owner) && owner != NULL)
	{
		OwnerHook  *hook = MemoryContextAlloc(owner, sizeof(OwnerHook));

		hook->handle = handle;
		hook->generation = generation;
		hook->cb.func = owner_gone;
		hook->cb.arg = hook;
		MemoryContextRegisterResetCallback(owner, &hook->cb);
	}
	return buf;
}

static StepInfo *
step_info(FunctionCallInfo fcinfo)
{
	StepInfo   *info = (StepInfo *) fcinfo->flinfo->fn_extra;

	if (info == NULL)
	{
		Oid			model_type = PG_NARGS() > 3 ? get_fn_expr_argtype(fcinfo->flinfo, 3) : InvalidOid;
		Oid			out;
		bool		varlena;

		if (PG_NARGS() > 3 && !OidIsValid(model_type))
			elog(ERROR, "groupml._learn_step: cannot tell its argument types");
		info = MemoryContextAllocZero(fcinfo->flinfo->fn_mcxt, sizeof(StepInfo));
		info->bool_label = get_fn_expr_argtype(fcinfo->flinfo, 2) == BOOLOID;
		if (OidIsValid(model_type))
		{
			getTypeOutputInfo(model_type, &out, &varlena);
			fmgr_info_cxt(out, &info->model_out, fcinfo->flinfo->fn_mcxt);
		}
		fcinfo->flinfo->fn_extra = info;
	}
	return info;
}

/* the buffer of the state argument (a new one for a NULL state); the previous row's is cached */
static RowBuffer *
state_buffer(FunctionCallInfo fcinfo, StepInfo *info, bool with_model)
{
	RowBuffer  *buf;

	if (PG_ARGISNULL(0))
		buf = new_buffer(fcinfo, info, with_model);
	else
	{
		buf = find_buffer(PG_GETARG_INT64(0));
		if (buf == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_EXCEPTION),
					 errmsg("groupml lost a row buffer (the backend was reset mid-aggregate)"),
					 errhint("Run the statement again.")));
	}
	last_buffer = buf;
	return buf;
}

/* room for one more row of buf->d + 1 values; returns where it goes */
static double *
next_row(RowBuffer *buf)
{
	Size		width = (Size) buf->d + 1;
	Size		need = ((Size) buf->n_rows + 1) * width;

	if (need > buf->capacity)
	{
		Size		capacity = Max(buf->capacity * 2, Max(need, 16 * width));

		if (buf->data == NULL)
			buf->data = MemoryContextAllocHuge(rows_context, capacity * sizeof(double));
		else
			buf->data = repalloc_huge(buf->data, capacity * sizeof(double));
		buf->capacity = capacity;
	}
	return buf->data + (Size) buf->n_rows * width;
}

PG_FUNCTION_INFO_V1(groupml_learn_step);

/* _learn_step(state, features float8[], label float8|boolean, model, search jsonb [, options jsonb]) */
Datum
groupml_learn_step(PG_FUNCTION_ARGS)
{
	StepInfo   *info = step_info(fcinfo);
	RowBuffer  *buf;
	ArrayType  *features;
	int			ndim;
	int32		n;
	double	   *row;

	buf = state_buffer(fcinfo, info, true);

	if (buf->anomaly != ANOMALY_NONE)
		PG_RETURN_INT64(buf->handle);
	if (PG_ARGISNULL(1) || PG_ARGISNULL(2))
	{
		buf->skipped++;
		PG_RETURN_INT64(buf->handle);
	}
	features = PG_GETARG_ARRAYTYPE_P(1);
	ndim = ARR_NDIM(features);
	n = ndim > 0 ? ARR_DIMS(features)[0] : 0;
	if (buf->d == 0)
	{
		if (n == 0)
		{
			buf->anomaly = ANOMALY_EMPTY;
			PG_RETURN_INT64(buf->handle);
		}
		buf->d = n;
	}
	else if (n != buf->d)
	{
		buf->anomaly = ANOMALY_LENGTH;
		buf->found = n;
		PG_RETURN_INT64(buf->handle);
	}
	if (ndim > 1)
	{
		buf->anomaly = ANOMALY_NESTED;
		PG_RETURN_INT64(buf->handle);
	}
	if (array_contains_nulls(features))
	{
		buf->skipped++;
		PG_RETURN_INT64(buf->handle);
	}

	row = next_row(buf);
	memcpy(row, ARR_DATA_PTR(features), (Size) buf->d * sizeof(double));
	row[buf->d] = info->bool_label ? (PG_GETARG_BOOL(2) ? 1.0 : 0.0) : PG_GETARG_FLOAT8(2);
	buf->n_rows++;
	if (!prestart_done || buf->stmt != prestart_stmt)
		maybe_prestart(fcinfo, buf);
	PG_RETURN_INT64(buf->handle);
}

PG_FUNCTION_INFO_V1(groupml_pack_step);

/*
 * _pack_step(state, VARIADIC "any"): _pack_rows' transition, train_groups' load. The values
 * come as separate float8 arguments, features then the label, so no array is built per row
 * (that halved the step's cost); a row with a NULL value is counted as skipped.
 */
Datum
groupml_pack_step(PG_FUNCTION_ARGS)
{
	int			nvalues = PG_NARGS() - 1;
	RowBuffer  *buf;
	double	   *row;
	int			i;

	if (fcinfo->flinfo->fn_extra == NULL)
	{
		/* train_groups builds every call: float8 values, at least one feature and the label */
		if (get_fn_expr_variadic(fcinfo->flinfo))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("groupml._pack_values takes a row's values as separate arguments, not a VARIADIC array"),
					 errhint("Pass _pack_values(f1, f2, ..., label), or an array to _pack_rows(ARRAY[f1, f2], label).")));
		if (nvalues < 2)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("groupml._pack_values takes at least one feature and the label; got %d value(s)", nvalues),
					 errhint("Pass the features, then the label: _pack_values(f1, f2, ..., label).")));
		for (i = 1; i <= nvalues; i++)
		{
			Oid			t = get_fn_expr_argtype(fcinfo->flinfo, i);

			if (t != FLOAT8OID)
				ereport(ERROR,
						(errcode(ERRCODE_DATATYPE_MISMATCH),
						 errmsg("Every value of groupml._pack_values must be float8; value %d is %s", i,
								OidIsValid(t) ? format_type_be(t) : "of an unknown type"),
						 errhint("Cast it: value::float8 (a boolean: value::int::float8).")));
		}
		fcinfo->flinfo->fn_extra = MemoryContextAllocZero(fcinfo->flinfo->fn_mcxt, sizeof(StepInfo));
	}
	buf = state_buffer(fcinfo, (StepInfo *) fcinfo->flinfo->fn_extra, false);
	if (buf->d == 0)
		buf->d = nvalues - 1;
	for (i = 1; i <= nvalues; i++)
	{
		if (PG_ARGISNULL(i))
		{
			buf->skipped++;
			PG_RETURN_INT64(buf->handle);
		}
	}
	row = next_row(buf);
	for (i = 0; i < nvalues; i++)
		row[i] = PG_GETARG_FLOAT8(i + 1);
	buf->n_rows++;
	PG_RETURN_INT64(buf->handle);
}

/* the error a buffer's anomaly stands for: its rows stopped there, so they are never handed out */
static void
check_anomaly(RowBuffer *buf)
{
	if (buf->anomaly == ANOMALY_EMPTY)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("groupml: The features array of a group must not be empty; got an empty array"),
				 errhint("Pass the feature columns as ARRAY[f1, f2, ...].")));
	if (buf->anomaly == ANOMALY_LENGTH)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("groupml: Every features array of a group must have the same length; expected %d values, "
						"found %d", buf->d, buf->found),
				 errhint("Build the array from the same columns for every row, e.g. ARRAY[f1, f2, f3].")));
	if (buf->anomaly == ANOMALY_NESTED)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("groupml: The features array of a group must be one-dimensional; got a nested array"),
				 errhint("Pass ARRAY[f1, f2, ...] with one value per feature.")));
}

PG_FUNCTION_INFO_V1(groupml_learn_rows);

/* _learn_rows(handle) -> bytea: the buffer's rows, native float8, d features then the label */
Datum
groupml_learn_rows(PG_FUNCTION_ARGS)
{
	RowBuffer  *buf = find_buffer(PG_GETARG_INT64(0));
	Size		len;
	bytea	   *out;

	if (buf == NULL)
		PG_RETURN_NULL();
	check_anomaly(buf);
	len = (Size) buf->n_rows * ((Size) buf->d + 1) * sizeof(double);
	if (len > MaxAllocSize - VARHDRSZ)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("A group of learn_over_groups holds %lld rows of %d values (%zu bytes); at most %zu bytes "
						"can be handed to training", (long long) buf->n_rows, buf->d + 1, len,
						(Size) (MaxAllocSize - VARHDRSZ)),
				 errhint("Split the group (GROUP BY more columns), or use groupml.train_groups.")));
	out = (bytea *) palloc(VARHDRSZ + len);
	SET_VARSIZE(out, VARHDRSZ + len);
	if (len > 0)
		memcpy(VARDATA(out), buf->data, len);
	PG_RETURN_BYTEA_P(out);
}

/* appends len bytes to the transaction's load arena (created on first use); returns their offset */
static off_t
arena_append(const char *data, Size len)
{
	off_t		offset;
	Size		done = 0;

	if (arena_fd < 0)
	{
		arena_fd = memfd_create("groupml load", MFD_CLOEXEC);
		if (arena_fd < 0)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("groupml could not create the memory file that hands a load's rows to training: %m"),
					 errhint("Check the backend's limit on open files.")));
		arena_end = 0;
	}
	offset = arena_end;
	while (done < len)
	{
		ssize_t		n = pwrite(arena_fd, data + done, Min(len - done, (Size) 1 << 30), offset + (off_t) done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("groupml could not write %zu bytes of a group's rows to its memory file: %m", len),
					 errhint("The load needs memory for every group's rows once more while it runs; free memory, "
							 "or train fewer groups per call.")));
		done += (Size) n;
	}
	arena_end = offset + (off_t) len;
	return offset;
}

PG_FUNCTION_INFO_V1(groupml_pack_shared);

/*
 * _pack_shared(handle) -> int8[] {fd, offset, bytes}: the final function of train_groups'
 * load. Writes the group's rows (native float8, d features then the label) to the load arena
 * and frees the buffer's copy; fd is the arena's descriptor in this backend (-1 for a group
 * without rows), valid until the transaction ends.
 */
Datum
groupml_pack_shared(PG_FUNCTION_ARGS)
{
	RowBuffer  *buf = PG_ARGISNULL(0) ? NULL : find_buffer(PG_GETARG_INT64(0));
	Size		len;
	Datum		ref[3];
	off_t		offset = 0;

	if (buf == NULL)
		PG_RETURN_NULL();
	check_anomaly(buf);
	if (buf->data == NULL && buf->n_rows > 0)
		elog(ERROR, "groupml._pack_shared: the group's rows were handed out already");
	len = (Size) buf->n_rows * ((Size) buf->d + 1) * sizeof(double);
	if (len > 0)
	{
		offset = arena_append((const char *) buf->data, len);
		pfree(buf->data);		/* the arena holds them now: the load's peak memory is one copy, not two */
		buf->data = NULL;
		buf->capacity = 0;
	}
	ref[0] = Int64GetDatum(len > 0 ? arena_fd : -1);
	ref[1] = Int64GetDatum((int64) offset);
	ref[2] = Int64GetDatum((int64) len);
	PG_RETURN_ARRAYTYPE_P(construct_array(ref, 3, INT8OID, sizeof(int64), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

PG_FUNCTION_INFO_V1(groupml_pack_read);

/* _pack_read(ref int8[]) -> bytea: the bytes a _pack_shared reference names, read back from the arena */
Datum
groupml_pack_read(PG_FUNCTION_ARGS)
{
	ArrayType  *arr = PG_GETARG_ARRAYTYPE_P(0);
	int64	   *ref;
	bytea	   *out;
	Size		done = 0;

	if (ARR_NDIM(arr) != 1 || ARR_DIMS(arr)[0] != 3 || ARR_ELEMTYPE(arr) != INT8OID || ARR_HASNULL(arr))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("groupml._pack_read takes a reference {fd, offset, bytes} as _pack_shared returns it"),
				 errhint("Pass the value of groupml._pack_values or groupml._pack_rows.")));
	ref = (int64 *) ARR_DATA_PTR(arr);
	if (ref[2] != 0 && (arena_fd < 0 || ref[0] != arena_fd || ref[1] < 0 || ref[2] < 0 || ref[1] + ref[2] > (int64) arena_end))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("groupml._pack_read: {%lld, %lld, %lld} is not a range of this transaction's load",
						(long long) ref[0], (long long) ref[1], (long long) ref[2]),
				 errhint("Read a load's rows in the transaction that loaded them.")));
	if (ref[2] < 0 || (Size) ref[2] > MaxAllocSize - VARHDRSZ)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("groupml._pack_read: %lld bytes do not fit in a bytea (at most %zu)", (long long) ref[2],
						(Size) (MaxAllocSize - VARHDRSZ)),
				 errhint("Read a smaller group.")));
	out = (bytea *) palloc(VARHDRSZ + (Size) ref[2]);
	SET_VARSIZE(out, VARHDRSZ + (Size) ref[2]);
	while (done < (Size) ref[2])
	{
		ssize_t		n = pread(arena_fd, VARDATA(out) + done, (Size) ref[2] - done, (off_t) ref[1] + (off_t) done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			ereport(ERROR, (errcode_for_file_access(), errmsg("groupml._pack_read could not read the load: %m")));
		done += (Size) n;
	}
	PG_RETURN_BYTEA_P(out);
}

static void put_buffer(ReturnSetInfo *rsinfo, RowBuffer *buf);

PG_FUNCTION_INFO_V1(groupml_learn_buffers);

/* _learn_buffers(handle DEFAULT NULL): the live buffers of this backend (or the one given) */
Datum
groupml_learn_buffers(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	HASH_SEQ_STATUS seq;
	RowBuffer  *buf;

	InitMaterializedSRF(fcinfo, 0);
	if (registry == NULL)
		return (Datum) 0;
	if (!PG_ARGISNULL(0))
	{
		/* one buffer: a lookup (the final function asks for its own at every group) */
		buf = find_buffer(PG_GETARG_INT64(0));
		if (buf != NULL)
			put_buffer(rsinfo, buf);
		return (Datum) 0;
	}
	hash_seq_init(&seq, registry);
	while ((buf = (RowBuffer *) hash_seq_search(&seq)) != NULL)
		put_buffer(rsinfo, buf);
	return (Datum) 0;
}

/* one row of _learn_buffers */
static void
put_buffer(ReturnSetInfo *rsinfo, RowBuffer *buf)
{
	Datum		values[10];
	bool		nulls[10];

	memset(nulls, 0, sizeof(nulls));
	values[0] = Int64GetDatum(buf->handle);
	values[1] = Int32GetDatum(buf->d);
	values[2] = Int64GetDatum(buf->n_rows);
	values[3] = Int64GetDatum(buf->skipped);
	if (buf->anomaly == ANOMALY_NONE)
		nulls[4] = true;
	else
		values[4] = CStringGetTextDatum(anomaly_names[buf->anomaly]);
	values[5] = Int32GetDatum(buf->found);
	nulls[5] = buf->anomaly != ANOMALY_LENGTH;
	values[6] = TimestampTzGetDatum(buf->stmt);
	if (buf->model == NULL)
		nulls[7] = true;
	else
		values[7] = CStringGetTextDatum(buf->model);
	if (buf->search == NULL)
		nulls[8] = true;
	else
		values[8] = JsonbPGetDatum(buf->search);
	if (buf->options == NULL)
		nulls[9] = true;
	else
		values[9] = JsonbPGetDatum(buf->options);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}
