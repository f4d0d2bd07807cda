/*
 * embfs on-media layout, shared by mkfs.embfs and the daemon.
 *
 * The pool is a libpmemobj pool (layout name EMB_LAYOUT).  Its root object is
 * struct emb_super.  Everything embfs places in the pool is reached from it:
 *
 *   emb_super
 *     cat_chunks[]  -> emb_table[EMB_CAT_PER_CHUNK]        table catalog
 *     journal_off   -> emb_journal                          group-commit intent log
 *     classes[]     -> singly linked emb_slab lists         row versions
 *   emb_table.dir_off -> emb_dir -> emb_seg[] -> emb_bucket  persistent row index
 *     emb_bucket slot -> emb_version, or emb_link -> ...  a row's chain, newest first
 *   snaps_off     -> emb_snaps                             snapshot records
 *     emb_snap.tables_off -> emb_snap_table[]              catalog as of the snapshot
 *
 * All offsets are PMEMoid offsets inside this pool (0 = none).  All fields are
 * fixed width and little endian (the only supported host order).  A change to
 * any structure here bumps EMB_LAYOUT_VERSION.
 *
 * Damage (layout 2).  What changes only inside libpmemobj transactions is
 * covered by a checksum recomputed in the same transaction and verified at
 * mount before recovery writes anything: the superblock's dynamic part
 * (dyn_csum), each catalog entry (free ones included), each snapshot record
 * with its table array, the index reserve and the spill segment table.  The
 * journal has a magic (its records are checksummed), slab and index segment
 * headers are checked against their geometry.  Row versions and index
 * buckets, which commits change by 8-byte stores, carry checksums verified
 * when read (store/vcheck.c, store/index.c).  Fields changed by plain 8-byte
 * stores are not covered: the superblock's clean, mount_count and batch, a
 * table's size, nrows and times, a snapshot's excl_bytes, the spill
 * segments' state and counts (range-checked), slab bitmaps.
 */
#ifndef EMBFS_LAYOUT_H
#define EMBFS_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#define EMB_LAYOUT "embfs"
#define EMB_MAGIC "EMBFSPL\0"
#define EMB_LAYOUT_VERSION 3u /* 2: checksummed versions, index buckets and metadata;
				* 3: 16-byte version headers, links for chains, 8-byte index slots */

#define EMB_NAME_MAX 255
#define EMB_LABEL_MAX 63
#define EMB_CAT_PER_CHUNK 256u
#define EMB_CAT_CHUNKS 256u /* at most 65536 tables */
#define EMB_MAX_CLASSES 64u
#define EMB_ROW_MAX 65536u /* largest row in bytes */
#define EMB_JOURNAL_CAP 8184u /* row updates per group commit: the journal fills one chunk */
/* libpmemobj serves allocations of at most this size from runs of small
 * objects, larger ones from whole 256 KiB chunks; metadata objects are sized
 * to exactly one chunk (runs of big objects waste chunks on small pools). */
#define EMB_CHUNK_ALLOC (256u * 1024 - 64)
#define EMB_MAX_SNAPS 256u

/* Row index geometry (256-byte buckets, two-choice, extendible hashing with
 * segments that grow once in place before they split). */
#define EMB_BUCKET_SLOTS 30u
/* A segment holds EMB_SEG_SMALL buckets, or EMB_SEG_LARGE once it has grown
 * in place; a large segment that fills splits into two small ones (one
 * more hash bit).  Four small or three large ones fill a 256 KiB chunk of
 * libpmemobj's heap (with the 64 bytes each takes to align itself). */
#define EMB_SEG_SMALL 254u
#define EMB_SEG_LARGE 339u
#define EMB_MAX_DEPTH 26u

enum emb_dtype {
	EMB_DT_F32 = 0,
	EMB_DT_F16 = 1,
	EMB_DT_BF16 = 2,
	EMB_DT_I8 = 3,
	EMB_DT_U8 = 4,
	EMB_DT_F64 = 5,
	EMB_DT_I16 = 6,
	EMB_DT_I32 = 7,
	EMB_DT_COUNT
};

/* Superblock: the pool's root object. */
struct emb_super {
	/* static part, covered by static_csum */
	char magic[8];
	uint32_t layout_version;
	uint32_t reserved0;
	uint8_t uuid[16];
	char label[EMB_LABEL_MAX + 1];
	uint64_t pool_size;  /* bytes of the pool file/device at mkfs time */
	uint64_t created_ns;
	uint64_t hash_seed;
	uint64_t static_csum; /* XXH64 of everything above this field */

	/* dynamic part, each field changed by an 8-byte store or in a tx */
	uint64_t clean;       /* 1 after a clean unmount, 0 while mounted */
	uint64_t mount_count;
	uint64_t batch;       /* current batch id (snapshots advance it) */
	uint64_t next_gen;    /* generation counter for table inodes */
	uint64_t journal_off;
	uint64_t cat_chunks[EMB_CAT_CHUNKS];
	struct emb_class {
		uint32_t slot_size; /* 0 = unused class */
		uint32_t slab_size;
		uint64_t head;      /* first emb_slab of this class */
		uint64_t nslabs;
		uint64_t reserved;
	} classes[EMB_MAX_CLASSES];
	uint64_t snaps_off;   /* emb_snaps */
	uint64_t snap_seq;    /* generation counter for snapshot records */
	uint64_t resv_off;    /* emb_resv: heap held back for index growth */
	uint64_t spill_off;   /* emb_spill: the spill device's segment table, 0 = never spilled */
	/* times of the root directory and of .snapshots (store/dirs.c): 0 in a
	 * pool made before they were kept, which then shows created_ns; changed
	 * by 8-byte stores, so outside dyn_csum */
	uint64_t root_mtime_ns, root_ctime_ns;
	uint64_t snaps_mtime_ns, snaps_ctime_ns;
	/* a restore or rollback in progress (store/intent.c): zero in a pool
	 * made before it was kept, which reads as none */
	struct emb_intent {
		uint32_t kind;      /* EMB_INTENT_* */
		uint32_t snap_idx;
		uint64_t snap_gen;
		uint64_t table_gen; /* EMB_INTENT_RESTORE: the live table's */
		uint64_t csum;      /* XXH64 of the fields above */
	} intent;
	/* owner, group and mode of the root directory and of .snapshots
	 * (store/dirs.c): zero in a pool made before they were kept, which
	 * then shows the defaults (root's, 0755 and 0555); written in a
	 * transaction, checksummed */
	struct emb_dirperm {
		uint32_t uid;
		uint32_t gid;
		uint32_t mode;  /* EMB_PERM_SET | the permission bits (07777); 0 = the defaults */
		uint32_t csum;  /* low 32 bits of the XXH64 of the fields above */
	} root_perm, snaps_perm;
	uint8_t reserved1[120];
	uint64_t dyn_csum;    /* XXH64 of next_gen .. spill_off (changed only in transactions) */
};
#define EMB_SUPER_STATIC_LEN offsetof(struct emb_super, static_csum)
#define EMB_PERM_SET 0x80000000u
#define EMB_INTENT_NONE 0u
#define EMB_INTENT_RESTORE 1u  /* one table back to a snapshot */
#define EMB_INTENT_ROLLBACK 2u /* every table back to a snapshot */

/* One table (a file at the mount's root). */
#define EMB_T_USED 1u   /* slot holds a table */
#define EMB_T_ORPHAN 2u /* unlinked; rows freed at last close or at mount */
#define EMB_T_ZOMBIE 4u /* unlinked and closed, rows kept for live snapshots */
#define EMB_T_DYING 8u  /* rows gone, index being freed segment by segment (free_at) */
struct emb_table {
	uint64_t gen;       /* inode generation, unique per pool */
	uint32_t flags;
	uint32_t mode;
	uint32_t uid;
	uint32_t gid;
	uint32_t dim;
	uint32_t row_size;
	uint32_t dtype;
	uint32_t reserved0;
	uint64_t size;      /* file size in bytes */
	uint64_t nrows;     /* stored rows */
	uint64_t atime_ns;
	uint64_t mtime_ns;
	uint64_t ctime_ns;
	uint64_t dir_off;   /* emb_dir of the row index, 0 = no rows yet */
	uint64_t trim_from; /* rows >= this must be dropped (crash during truncate); UINT64_MAX = none */
	uint64_t nsegs;     /* index segments (space accounting) */
	uint64_t free_at;   /* EMB_T_DYING: directory entries below this are freed */
	uint64_t csum;      /* XXH64 of all but size, nrows, the times and itself (see catalog.c) */
	uint8_t reserved1[136];
	char name[EMB_NAME_MAX + 1];
};

/*
 * Row versions (layout 3).  Versions live in fixed-size slots of slabs: a
 * table's rows in the slots of its row size's class (16-byte header + row
 * bytes, rounded to 8), links, stubs and tombstones in the 24-byte class.
 *
 * A row's versions form its chain, newest first; the index holds a ref to
 * the chain's first element.  A ref is the pool offset of a version, or of
 * a link with EMB_REF_LINK set.  A row with one version (the common case)
 * has the index refer to the version itself: 16 bytes of header per row.
 * A row whose older versions a snapshot still needs has a link per element
 * but the last: link { ver, next } names the element's version and the ref
 * of the next older element, so a chain's batches strictly decrease along
 * it.  A tombstone records a delete while an older version is needed (or a
 * run on the spill device may hold the row).
 *
 * key holds the row id (bits 0..47), the kind (EMB_VK_*) and, in a version,
 * bits 32..43 of its batch; batch holds bits 0..31.  Row ids are at most
 * EMB_ROW_ID_MAX and batches at most EMB_BATCH_MAX: a freed slot's row id
 * is poisoned to all ones, which is no row's, so a damaged ref to it never
 * passes for a version.
 *
 * csum (store/vcheck.c) is a 32-bit digest of the version's key -- row,
 * batch, the table's catalog slot, EMB_VK_TOMB -- followed, in a version
 * that holds its bytes (neither tombstone nor stub), by the row bytes.  A
 * link carries no checksum: its key names its row and kind, and what its
 * ver and next lead to is validated when followed (the index, version.c).
 * Links change by 8-byte stores of ver and next (reclaim, relinks).
 */
#define EMB_ROW_ID_BITS 48u
#define EMB_ROW_ID_MASK ((1ull << EMB_ROW_ID_BITS) - 1)
#define EMB_ROW_ID_MAX (EMB_ROW_ID_MASK - 1)  /* largest row id a table can store */
#define EMB_BATCH_MAX ((1ull << 44) - 1)      /* largest batch id */
#define EMB_VK_TOMB (1ull << 48)   /* a tombstone: no bytes */
#define EMB_VK_STUB (1ull << 49)   /* a stub: the row bytes are on the spill device */
#define EMB_VK_LINK (1ull << 50)   /* a link, not a version */
#define EMB_VK_KIND (0xfull << 48)
#define EMB_VK_BATCH_SHIFT 52
struct emb_version {
	uint64_t key;    /* row | EMB_VK_TOMB | EMB_VK_STUB | batch bits 32..43 << 52 */
	uint32_t batch_lo; /* batch bits 0..31 */
	uint32_t csum;   /* digest of the key and (not in a stub or tombstone) the row bytes */
	/* row bytes follow (not in a stub or tombstone) */
};

/* An element of a chain that has a next one.  32 bytes, as every object of
 * the small class: slots aligned to 32 bytes never straddle a 4 KiB block,
 * so damage to a block (a zeroed page) takes a link whole -- its key with
 * it, which is found -- never only its next ref, which would end a chain
 * early without a trace. */
struct emb_link {
	uint64_t key;    /* row | EMB_VK_LINK */
	uint64_t ver;    /* offset of the element's version (a row version, stub or tombstone) */
	uint64_t next;   /* ref of the next older element */
	uint64_t reserved;
};

/* A version whose bytes were moved to the spill device: the same header
 * (EMB_VK_STUB set, csum that of the key alone: the record on the device
 * carries the bytes' checksum and the same key) and where the bytes are. */
struct emb_stub {
	struct emb_version v;
	uint64_t loc;    /* byte offset of its emb_srec on the spill device */
	uint64_t reserved;
};
#define EMB_SMALL_SLOT 32u /* the class of links, stubs and tombstones */

/* Refs: pool offsets (8-aligned), bit 0 set for a link; index slots keep
 * a 16-bit tag of the row's hash above them. */
#define EMB_REF_LINK 1ull
#define EMB_REF_MASK ((1ull << 48) - 1)

#define EMB_SLAB_MAGIC 0x42414c53424d45ull /* "EMBSLAB" */
struct emb_slab {
	uint64_t magic;
	uint32_t slot_size;
	uint32_t nslots;
	uint64_t next;       /* next slab of the class */
	uint64_t data_off;   /* byte offset of slot 0 from the slab start (64-aligned) */
	uint64_t raw_off;    /* PMEMoid offset of the allocation (the slab is aligned inside it) */
	uint64_t reserved[3];
	uint64_t bitmap[];   /* 1 = slot holds a published or journaled version */
};

/*
 * Index bucket: 256 bytes = 4 cache lines, 30 refs.  The index maps a row
 * to the ref of its chain's first element; the row id itself is in that
 * element (a version's or link's key), so a slot is 8 bytes: the ref and,
 * above it, 16 bits of the row's hash (tag).  A row has two candidate
 * buckets in its segment (two-choice: it goes to the emptier); its first
 * bucket's overflow count says how many of the rows that have it first sit
 * in their second.  A lookup compares tags, then the key of the element a
 * matching slot refers to.  An entry is published by one 8-byte store of
 * the bucket control word.  csum (store/index.c) covers the valid bits and
 * the overflow count of ctl and each valid slot (its index and the whole
 * 8-byte value); an empty bucket's is not zero, so a zeroed block of
 * buckets does not pass for empty ones.
 */
struct emb_bucket {
	uint64_t ctl;  /* bits 0..29 valid, bits 32..39 overflow count */
	uint32_t csum;
	uint32_t pad;
	uint64_t slot[EMB_BUCKET_SLOTS]; /* tag << 48 | ref */
};
#define EMB_CTL_VALID_MASK ((1ull << EMB_BUCKET_SLOTS) - 1)
#define EMB_CTL_OVF_SHIFT 32
#define EMB_CTL_OVF_MASK (0xffull << EMB_CTL_OVF_SHIFT)

/* A segment's header is written once, when the segment is made. */
#define EMB_SEG_MAGIC 0x474553424d45ull /* "EMBSEG" */
struct emb_seg {
	uint64_t magic;
	uint32_t local_depth;
	uint32_t nbuckets;  /* EMB_SEG_SMALL or EMB_SEG_LARGE */
	uint64_t prefix;    /* the top local_depth bits of the hashes of its keys */
	uint64_t raw_off;   /* PMEMoid offset of the allocation (seg is aligned inside it) */
	uint64_t csum;      /* XXH64 of the fields above */
	uint8_t pad[24];
	struct emb_bucket bucket[];
};

#define EMB_DIR_MAGIC 0x52494442u /* "BDIR" */
struct emb_dir {
	uint32_t global_depth;
	uint32_t magic;
	uint64_t seg[];     /* 1 << global_depth offsets of emb_seg */
};

/* Group-commit intent log (see store/commit.c).  Records name refs (a
 * version's offset, or a link's with EMB_REF_LINK); aux holds the offset of
 * a commit's new version when new_off is a link to it, and EMB_JR_* flags
 * in its low bits. */
struct emb_jrec {
	uint64_t row;
	uint64_t old_off;   /* ref replaced or deleted, 0 = none */
	uint64_t new_off;   /* ref written, 0 = delete */
	uint64_t aux;       /* the new version behind a new link | EMB_JR_* */
};
#define EMB_JR_DAMAGED 1u /* old_off failed its checks: recovery never reads nor frees it */
#define EMB_JR_CHAIN 2u   /* an older element of a row an eviction deletes: freed if the row left the index */
#define EMB_JR_FLAGS 7ull
struct emb_journal {
	uint64_t count;        /* records valid when csum matches */
	uint64_t seq;
	uint32_t table;        /* one commit updates one table */
	uint32_t kind;         /* EMB_J_COMMIT, EMB_J_RECLAIM or EMB_J_RELINK */
	uint64_t nrows_before; /* the table's row count before the commit */
	uint64_t size_hint;    /* the file size the commit extends to */
	uint64_t csum;         /* XXH64 of the fields above and the records */
	uint64_t magic;        /* EMB_JOURNAL_MAGIC */
	uint8_t pad[8];
	struct emb_jrec ent[EMB_JOURNAL_CAP];
};
#define EMB_JOURNAL_MAGIC 0x4c4e524a424d45ull /* "EMBJRNL" */

#define EMB_J_COMMIT 0u
#define EMB_J_RECLAIM 1u /* records name versions and links unlinked from chains: free if unreachable */
#define EMB_J_RELINK 2u  /* version old_off is replaced in its chain by new_off (a stub, or a promoted copy) */

/* Index room promised to rows a write-back cache holds: segment-sized blocks
 * allocated ahead and given back one by one when a split finds the heap full. */
#define EMB_RESV_MAX 32000u
struct emb_resv {
	uint64_t n;
	uint64_t csum;         /* XXH64 of n and block[0..n) */
	uint64_t block[EMB_RESV_MAX];
};

/* Snapshots: the catalog as of the snapshot, and the batch it closes. */
struct emb_snap_table {
	uint32_t id, dim, row_size, dtype;
	uint64_t gen, size, nrows;
	uint32_t mode, uid, gid, reserved;
	uint64_t mtime_ns, ctime_ns;
	char name[EMB_NAME_MAX + 1];
};
#define EMB_S_USED 1u
#define EMB_S_DURABLE 2u   /* every row it holds is in the pool */
#define EMB_S_DROPPING 4u  /* rmdir in progress: finished at mount */
#define EMB_S_PENDING 8u   /* taken without a transaction, not durable yet: its
			    * table array is in DRAM (tables_off 0) and the
			    * record may be torn after a crash; dropped at mount */
struct emb_snap {
	uint64_t gen;
	uint64_t batch;        /* holds the newest version of each row with batch <= this */
	uint64_t flags;        /* EMB_S_* in the low half, their complement in the high half:
				* one 8-byte store changes both (store/snaprec.c) */
	uint64_t created_ns;
	uint64_t tables_off;   /* emb_snap_table[ntables] */
	uint64_t excl_bytes;   /* space only this snapshot holds (recomputed at rmdir) */
	uint32_t ntables;
	uint32_t reserved;
	uint64_t csum;         /* XXH64 of gen, batch, EMB_S_USED, created_ns, tables_off,
				* ntables, name and the table array (a free record's too) */
	char name[EMB_NAME_MAX + 1];
};
struct emb_snaps {
	struct emb_snap s[EMB_MAX_SNAPS];
};

/*
 * Spill device (see store/tier/device.c).  Its first EMB_SPILL_HDR bytes are an
 * emb_spill_disk header naming the pool; segment k is the seg_size bytes at
 * EMB_SPILL_HDR + k * seg_size.  Segments are append-only: records are packed
 * into 4 KiB blocks (a record never straddles a block unless it is larger
 * than one, and then starts one), a block ends at a zero magic.  The pool
 * keeps the segment table (emb_spill): state, bytes written (fill), live
 * record bytes (a hint, recounted after a crash) and a sequence number.
 */
#define EMB_SPILL_MAGIC "EMBSPILL"
#define EMB_SPILL_VERSION 2u /* 2: a run's segment list in chained blocks */
#define EMB_SPILL_HDR 4096u
#define EMB_SPILL_BLOCK 4096u
#define EMB_SEG_FREE 0u
#define EMB_SEG_OPEN 1u
#define EMB_SEG_SEALED 2u
#define EMB_SEG_RUN 3u     /* holds blocks of a sorted run (store/tier/run.c) */
struct emb_spill_disk {
	char magic[8];
	uint32_t version;
	uint32_t reserved0;
	uint8_t pool_uuid[16];
	uint8_t uuid[16];      /* this spill device; also in emb_spill */
	uint64_t size;         /* bytes used of the device */
	uint64_t seg_size;
	uint64_t nsegs;
	uint64_t csum;         /* XXH64 of the fields above */
};
struct emb_sseg {
	uint32_t state;
	uint32_t nlive;        /* records stubs still point at (hint, like live) */
	uint64_t fill;         /* bytes written, a multiple of EMB_SPILL_BLOCK */
	uint64_t live;         /* bytes of records stubs still point at (hint) */
	uint64_t seq;
};
struct emb_spill {
	char magic[8];
	uint8_t uuid[16];
	uint64_t size, seg_size, nsegs;
	uint64_t seq;
	uint64_t csum;         /* XXH64 of magic .. nsegs (fixed at format) */
	uint64_t runs_off;     /* emb_rundir of the sorted runs, 0 = none yet */
	uint64_t reserved;
	struct emb_sseg seg[];
};

/*
 * Sorted runs (store/tier/run.c).  Rows of one table written out whole, in row-id
 * order, into blocks of blk_size bytes (4 KiB, or a multiple for big rows)
 * on whole segments (seg_size / blk_size blocks each).  A block starts with
 * emb_rblk and holds records (row, batch | EMB_RREC_TOMB, the row's bytes),
 * sorted by row, a row's versions newest first; a row's versions share a
 * block unless they fill one.  After the last data block come the run's
 * meta blocks: emb_rmeta (with the list of the run's segments) at meta_loc,
 * then the first row id of each data block (fences) and a Bloom filter of
 * the run's row ids.  The pool keeps only a fixed record per run in the run
 * directory: no pool allocation per run, and a few bytes per run, not per
 * row.  Immutable once written.
 */
#define EMB_RBLK_MAGIC 0x4b4c4252u      /* "RBLK" */
#define EMB_RMETA_MAGIC 0x4154454d4e5552ull /* "RUNMETA" */
#define EMB_RREC_TOMB (1ull << 63)
#define EMB_RUN_LIVE 1u
#define EMB_RUN_DEAD 2u                 /* replaced or dropped: freed once no reader has it */
struct emb_run {
	uint64_t id;           /* unique, never 0; its low 32 bits are in each block */
	uint32_t table;        /* catalog slot */
	uint32_t rec_size;     /* 16 + row_size */
	uint64_t table_gen;
	uint64_t seq;          /* order among the table's runs: larger = newer */
	uint64_t nrecs, nlive; /* records; those that are not tombstones */
	uint64_t nblocks;      /* data blocks */
	uint32_t blk_size;
	uint32_t nsegs;
	uint64_t min_row, max_row;
	uint32_t level;        /* merges it went through */
	uint32_t bloom_k;
	uint64_t bloom_bits;
	uint64_t meta_loc;     /* device offset of its emb_rmeta block */
	uint64_t meta_csum;    /* XXH64 of the fences and the filter */
	uint32_t state;        /* 0 = free record, EMB_RUN_LIVE, EMB_RUN_DEAD */
	uint32_t list_cap;     /* segments one list block of its meta names */
	uint64_t csum;         /* XXH64 of the record (csum = 0) */
};
struct emb_rblk {
	uint32_t magic;
	uint32_t nrec;
	uint32_t run_id;       /* low 32 bits of the run's id */
	uint32_t csum;         /* low 32 bits of XXH3 of the block with csum = 0 */
};
/* The first meta blocks: the run's segments, (blk_size - 40) / 4 per
 * block, each block naming where the next one is (its place depends on
 * segments listed later); fences and filter follow in the next blocks
 * (run blocks nblocks + list blocks ...). */
struct emb_rmeta {
	uint64_t magic;
	uint64_t id;
	uint32_t nsegs;        /* the run's segments, all list blocks together */
	uint32_t part;         /* this block is the part-th of the list */
	uint64_t csum;         /* XXH64 of this header (csum = 0) and seg[] */
	uint64_t next;         /* device offset of the next list block, 0 = the last */
	uint32_t seg[];
};
#define EMB_RUNDIR_MAGIC 0x3252494452554eull /* "NURDIR2" */
#define EMB_RUNDIR_CAP 2048u
struct emb_rundir {
	uint64_t magic;
	uint64_t next_id;
	struct emb_run run[EMB_RUNDIR_CAP];
};
#define EMB_SREC_MAGIC 0x52424d45u /* "EMBR" */
struct emb_srec {
	uint32_t magic;
	uint32_t len;          /* row bytes that follow */
	uint64_t row;
	uint64_t batch;
	uint32_t table;
	uint32_t csum;         /* XXH32 of this header (csum = 0) and the row bytes */
};

_Static_assert(sizeof(struct emb_stub) == EMB_SMALL_SLOT, "stub");
_Static_assert(sizeof(struct emb_link) == EMB_SMALL_SLOT, "link");
_Static_assert(sizeof(struct emb_srec) == 32, "spill record header");
_Static_assert(sizeof(struct emb_run) == 128, "run record");
_Static_assert(sizeof(struct emb_rmeta) == 40, "run meta header");
_Static_assert(sizeof(struct emb_rblk) == 16, "run block header");
_Static_assert(sizeof(struct emb_spill) == 80, "spill table header");
_Static_assert(sizeof(struct emb_sseg) == 32, "segment entry");
_Static_assert(sizeof(struct emb_spill_disk) <= EMB_SPILL_HDR, "spill header");
_Static_assert(sizeof(struct emb_super) % 8 == 0, "super");
_Static_assert(sizeof(struct emb_super) == 4520, "superblock: new fields take reserved1");
_Static_assert(offsetof(struct emb_super, dyn_csum) == 4512, "superblock: dyn_csum stays put");
_Static_assert(offsetof(struct emb_super, root_mtime_ns) == offsetof(struct emb_super, spill_off) + 8,
	       "directory times follow the fields dyn_csum covers, 8-byte aligned");
_Static_assert(sizeof(struct emb_journal) <= EMB_CHUNK_ALLOC, "journal fits a chunk");
_Static_assert(sizeof(struct emb_snaps) <= EMB_CHUNK_ALLOC, "snapshot table fits a chunk");
_Static_assert(sizeof(struct emb_resv) <= EMB_CHUNK_ALLOC, "reserve table fits a chunk");
_Static_assert(EMB_CAT_PER_CHUNK * sizeof(struct emb_table) <= EMB_CHUNK_ALLOC, "catalog chunk");
_Static_assert(sizeof(struct emb_snap_table) == 328, "snapshot table record");
_Static_assert(sizeof(struct emb_snap) == 320, "snapshot record");
_Static_assert(sizeof(struct emb_version) == 16, "version header");
_Static_assert(sizeof(struct emb_bucket) == 256, "bucket is 256 bytes");
_Static_assert(offsetof(struct emb_bucket, slot) == 16, "bucket header");
_Static_assert(EMB_BUCKET_SLOTS <= 32, "valid bits below the overflow count");
_Static_assert(sizeof(struct emb_seg) == 64, "segment header");
_Static_assert(4 * (64 + 64 + 256 * EMB_SEG_SMALL) <= 262144 - 1024 &&
	       3 * (64 + 64 + 256 * EMB_SEG_LARGE) <= 262144 - 1024, "segments fill a chunk");
_Static_assert(sizeof(struct emb_table) == 512, "catalog entry");
_Static_assert(sizeof(struct emb_jrec) == 32, "journal record");
_Static_assert(offsetof(struct emb_journal, ent) == 64, "journal header");
_Static_assert(offsetof(struct emb_super, static_csum) % 8 == 0, "csum aligned");
_Static_assert(sizeof(struct emb_slab) == 64, "slab header");

#endif
