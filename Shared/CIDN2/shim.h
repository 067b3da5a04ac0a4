#ifndef CIDN2_SHIM_H
#define CIDN2_SHIM_H
// libidn2: IDNA2008 for the domain of an email address (Shared/Models/EmailAddress.swift).
#include <idn2.h>
#endif
