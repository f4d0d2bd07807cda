/* embfs's version: one place for every program's -V */
#ifndef EMBFS_VERSION_H
#define EMBFS_VERSION_H
#define EMBFS_VERSION "0.15.0"
#endif
