/*
 * The helpers every file of fs/ may call, calling none of them: a table
 * inode's read view, readdir buffers, the words of a control file's
 * request, the gate of changes a restore closes (see struct embfs), the
 * inode forwarding a re-lay sets (relay.c writes it, everyone reads it) and
 * the freeing of an unlinked table the kernel no longer references.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fs.h"

int fs_view(struct embfs *fs, uint64_t ino, struct store_view *v, struct store_attr *a)
{
	struct fs_ino k = fs_ino(ino);
	int ret;
	if (k.kind == FS_TABLE)
		ret = front_view_live(&fs->fr, k.id, v);
	else if (k.kind == FS_SNAPTABLE)
		ret = front_view_snap(&fs->fr, k.idx, k.id, v);
	else
		return -ENOENT;
	return ret || !a ? ret : front_view_getattr(&fs->fr, v, a);
}

int fs_dir_begin(fuse_req_t req, struct fs_dirbuf *b, size_t size, off_t off)
{
	*b = (struct fs_dirbuf){ .req = req, .p = malloc(size), .cap = size, .off = off };
	if (!b->p)
		fuse_reply_err(req, ENOMEM);
	return b->p != NULL;
}

int fs_dir_add(struct fs_dirbuf *b, const char *name, uint64_t ino, mode_t mode, off_t next)
{
	if (b->full)
		return 0;
	if (next <= b->off)
		return 1; /* listed by an earlier readdir */
	struct stat st;
	memset(&st, 0, sizeof(st));
	st.st_ino = ino;
	st.st_mode = mode;
	size_t need = fuse_add_direntry(b->req, NULL, 0, name, NULL, 0);
	if (b->size + need > b->cap) {
		b->full = 1;
		return 0;
	}
	fuse_add_direntry(b->req, b->p + b->size, b->cap - b->size, name, &st, next);
	b->size += need;
	return 1;
}

void fs_dir_add_list(struct fs_dirbuf *b, const struct fs_dirent *list, size_t n)
{
	for (size_t i = 0; i < n; i++)
		fs_dir_add(b, list[i].name, list[i].ino, list[i].mode, (off_t)i + 1);
}

void fs_dir_reply(struct fs_dirbuf *b)
{
	fuse_reply_buf(b->req, b->p, b->size);
	free(b->p);
	b->p = NULL;
}

int ctl_words(const char *data, size_t size, off_t off, char (*w)[EMB_NAME_MAX + 1], int n)
{
	while (size && (data[size - 1] == '\n' || data[size - 1] == ' '))
		size--;
	if (off != 0 || size == 0 || memchr(data, 0, size) || memchr(data, '/', size))
		return -EINVAL;
	const char *p = data, *end = data + size;
	for (int i = 0; i < n; i++) {
		const char *sp = memchr(p, ' ', (size_t)(end - p));
		const char *we = sp ? sp : end;
		if (we == p || (size_t)(we - p) > EMB_NAME_MAX || (i < n - 1) != (sp != NULL))
			return -EINVAL;
		memcpy(w[i], p, (size_t)(we - p));
		w[i][we - p] = 0;
		p = we + 1;
	}
	return 0;
}

/* Changes (to table id, or GATE_NS) may go on: 0, or -EBUSY while a restore
 * runs on it or a re-lay on table id. */
int restore_gate_enter(struct embfs *fs, uint32_t id)
{
	pthread_rwlock_rdlock(&fs->gate_rw);
	uint32_t r = atomic_load(&fs->restoring);
	if ((r == GATE_NONE || (r != GATE_ALL && r != id && id != GATE_ANY)) && atomic_load(&fs->relaying) != id)
		return 0;
	pthread_rwlock_unlock(&fs->gate_rw);
	return -EBUSY;
}

void restore_gate_leave(struct embfs *fs)
{
	pthread_rwlock_unlock(&fs->gate_rw);
}

/* ---- inode forwarding (relay.c) and unlinked tables ------------------ */

/* fwd/rev hold id + 1; 0 is none */
uint32_t alias_live(struct embfs *fs, uint32_t id)
{
	uint32_t f = id < INO_NTABLES ? atomic_load(&fs->fwd[id]) : 0;
	return f ? f - 1 : id;
}

uint32_t alias_kernel(struct embfs *fs, uint32_t id)
{
	uint32_t r = id < INO_NTABLES ? atomic_load(&fs->rev[id]) : 0;
	return r ? r - 1 : id;
}

fuse_ino_t alias_ino(struct embfs *fs, fuse_ino_t ino)
{
	struct fs_ino k = fs_ino(ino);
	return k.kind == FS_TABLE ? fs_ino_table(alias_live(fs, k.id)) : ino;
}

uint32_t alias_drop(struct embfs *fs, uint32_t kid)
{
	pthread_mutex_lock(&fs->alias_mu);
	uint32_t f = atomic_exchange(&fs->fwd[kid], 0);
	if (f)
		atomic_store(&fs->rev[f - 1], 0);
	pthread_mutex_unlock(&fs->alias_mu);
	return f ? f - 1 : GATE_NONE;
}

fuse_ino_t alias_get(struct embfs *fs, fuse_ino_t asked, uint32_t *held)
{
	struct fs_ino k = fs_ino(asked);
	*held = GATE_NONE;
	if (k.kind != FS_TABLE)
		return asked;
	for (;;) {
		uint32_t id = alias_live(fs, k.id);
		atomic_fetch_add(&fs->users[id], 1);
		/* seq_cst both sides: either relay_locked sees this user, or
		 * this sees its new forwarding */
		if (alias_live(fs, k.id) == id) {
			*held = id;
			return fs_ino_table(id);
		}
		atomic_fetch_sub(&fs->users[id], 1);
	}
}

void alias_put(struct embfs *fs, uint32_t held)
{
	if (held != GATE_NONE)
		atomic_fetch_sub(&fs->users[held], 1);
}

int table_free_unlinked(struct embfs *fs, uint32_t id)
{
	/* rows written before a snapshot belong to it: written back, not
	 * dropped */
	if (front_table_snaps(&fs->fr, id) > 0)
		front_before_change(&fs->fr, id);
	front_after_change(&fs->fr, id, 0, UINT64_MAX);
	int ret = front_table_release(&fs->fr, id);
	if (ret)
		fprintf(stderr, "embfs: freeing unlinked table %u: %s\n", id, strerror(-ret));
	return ret;
}
