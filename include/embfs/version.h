/*
 * The embfs release, in one place: every program prints it for -V/--version
 * (with the pool layout and library versions of store_versions()).
 */
#ifndef EMBFS_VERSION_H
#define EMBFS_VERSION_H

#define EMBFS_VERSION "0.15.0"

#endif
