/* SPDX-License-Identifier: MIT */
/*
 * creds.c - credentials and profile settings, taken the way the AWS tools
 * take them: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN
 * first; otherwise the profile (AWS_PROFILE or "default") in the shared
 * credentials file (AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials),
 * then in the config file (AWS_CONFIG_FILE or ~/.aws/config, where the
 * section is "[profile NAME]" except for "[default]").  The config file
 * also gives region, endpoint_url and "s3 = addressing_style = path".
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "objstore_int.h"

#define INI_LINE_MAX 4096

static char *trim(char *s)
{
	char *e;

	while (isspace((unsigned char)*s))
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	return s;
}

int obj_ini_get(const char *file, const char *section, const char *key,
		char *out, size_t out_len)
{
	char line[INI_LINE_MAX], nested[64] = "";
	bool in_section = false;
	FILE *f = fopen(file, "r");
	int found = 0;

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		bool indented = line[0] == ' ' || line[0] == '\t';
		char *s = trim(line), *eq, *k, *v;

		if (!*s || *s == '#' || *s == ';')
			continue;
		if (*s == '[') {
			char *end = strchr(s, ']');

			if (!end)
				continue;
			*end = '\0';
			in_section = !strcmp(trim(s + 1), section);
			nested[0] = '\0';
			continue;
		}
		if (!in_section || !(eq = strchr(s, '=')))
			continue;
		*eq = '\0';
		k = trim(s);
		v = trim(eq + 1);
		if (!indented)
			nested[0] = '\0';
		if (!indented && !*v) {
			/* "s3 =" opens a nested block of indented keys. */
			snprintf(nested, sizeof(nested), "%s", k);
			continue;
		}
		if (indented && nested[0]) {
			char full[160];

			snprintf(full, sizeof(full), "%s.%s", nested, k);
			if (strcmp(full, key))
				continue;
		} else if (strcmp(k, key)) {
			continue;
		}
		if (strlen(v) >= out_len) {
			found = -ENAMETOOLONG;
			break;
		}
		strcpy(out, v);
		found = 1; /* keep going: a later duplicate wins, as in botocore */
	}
	if (ferror(f) && found == 0)
		found = -EIO;
	fclose(f);
	return found;
}

static void home_path(char *out, size_t len, const char *env,
		      const char *rel)
{
	const char *v = getenv(env), *home = getenv("HOME");

	if (v && *v)
		snprintf(out, len, "%s", v);
	else
		snprintf(out, len, "%s/%s", home ? home : "/root", rel);
}

/* Reads key from the file; -errno only matters when the file exists. */
static int lookup(const char *file, const char *section, const char *key,
		  char *out, size_t len, struct obj_error *err)
{
	int r = obj_ini_get(file, section, key, out, len);

	if (r == -ENOENT)
		return 0;
	if (r < 0) {
		obj_err_set(err, OBJ_ERR_CREDENTIALS, NULL,
			    "cannot read %s: %s", file, strerror(-r));
		return r;
	}
	return r;
}

static obj_status from_file(const char *file, const char *section,
			    struct obj_creds *c, struct obj_error *err)
{
	int a, s;

	a = lookup(file, section, "aws_access_key_id", c->access_key,
		   sizeof(c->access_key), err);
	if (a < 0)
		return OBJ_ERR_CREDENTIALS;
	s = lookup(file, section, "aws_secret_access_key", c->secret_key,
		   sizeof(c->secret_key), err);
	if (s < 0)
		return OBJ_ERR_CREDENTIALS;
	if (a && s) {
		if (lookup(file, section, "aws_session_token",
			   c->session_token, sizeof(c->session_token),
			   err) < 0)
			return OBJ_ERR_CREDENTIALS;
		snprintf(c->source, sizeof(c->source), "%s [%s]", file,
			 section);
		return OBJ_OK;
	}
	if (a || s) {
		obj_err_set(err, OBJ_ERR_CREDENTIALS, NULL,
			    "%s [%s] has %s but not %s", file, section,
			    a ? "aws_access_key_id" : "aws_secret_access_key",
			    a ? "aws_secret_access_key" : "aws_access_key_id");
		return OBJ_ERR_CREDENTIALS;
	}
	c->access_key[0] = c->secret_key[0] = '\0';
	return OBJ_ERR_NOT_FOUND;
}

static obj_status profile_settings(const char *cfgfile, const char *section,
				   struct obj_profile *p,
				   struct obj_error *err)
{
	char style[32];
	int r;

	if (lookup(cfgfile, section, "region", p->region, sizeof(p->region),
		   err) < 0 ||
	    lookup(cfgfile, section, "endpoint_url", p->endpoint_url,
		   sizeof(p->endpoint_url), err) < 0)
		return OBJ_ERR_CREDENTIALS;
	r = lookup(cfgfile, section, "s3.addressing_style", style,
		   sizeof(style), err);
	if (r < 0)
		return OBJ_ERR_CREDENTIALS;
	if (r > 0)
		p->path_style = !strcmp(style, "path") ? 1 :
				!strcmp(style, "virtual") ? 0 : -1;
	return OBJ_OK;
}

obj_status obj_creds_load(const char *profile, struct obj_creds *c,
			  struct obj_profile *p, struct obj_error *err)
{
	const char *ak = getenv("AWS_ACCESS_KEY_ID");
	const char *sk = getenv("AWS_SECRET_ACCESS_KEY");
	const char *tok = getenv("AWS_SESSION_TOKEN");
	char credfile[1024], cfgfile[1024], section[160];
	bool explicit_profile = profile || getenv("AWS_PROFILE");
	obj_status rc;

	memset(c, 0, sizeof(*c));
	memset(p, 0, sizeof(*p));
	p->path_style = -1;
	if (!profile)
		profile = getenv("AWS_PROFILE");
	if (!profile || !*profile)
		profile = "default";
	home_path(credfile, sizeof(credfile), "AWS_SHARED_CREDENTIALS_FILE",
		  ".aws/credentials");
	home_path(cfgfile, sizeof(cfgfile), "AWS_CONFIG_FILE", ".aws/config");
	if (!strcmp(profile, "default"))
		snprintf(section, sizeof(section), "default");
	else
		snprintf(section, sizeof(section), "profile %s", profile);
	rc = profile_settings(cfgfile, section, p, err);
	if (rc != OBJ_OK)
		return rc;

	if (ak && *ak && sk && *sk) {
		if (strlen(ak) >= sizeof(c->access_key) ||
		    strlen(sk) >= sizeof(c->secret_key) ||
		    (tok && strlen(tok) >= sizeof(c->session_token))) {
			obj_err_set(err, OBJ_ERR_CREDENTIALS, NULL,
				    "AWS_* credential variable too long");
			return OBJ_ERR_CREDENTIALS;
		}
		strcpy(c->access_key, ak);
		strcpy(c->secret_key, sk);
		if (tok)
			strcpy(c->session_token, tok);
		snprintf(c->source, sizeof(c->source), "environment");
		return OBJ_OK;
	}
	if ((ak && *ak) != (sk && *sk)) {
		obj_err_set(err, OBJ_ERR_CREDENTIALS, NULL,
			    "%s is set but %s is not",
			    ak && *ak ? "AWS_ACCESS_KEY_ID" :
			    "AWS_SECRET_ACCESS_KEY",
			    ak && *ak ? "AWS_SECRET_ACCESS_KEY" :
			    "AWS_ACCESS_KEY_ID");
		return OBJ_ERR_CREDENTIALS;
	}
	rc = from_file(credfile, profile, c, err);
	if (rc == OBJ_ERR_NOT_FOUND)
		rc = from_file(cfgfile, section, c, err);
	if (rc == OBJ_ERR_NOT_FOUND) {
		obj_err_set(err, OBJ_ERR_CREDENTIALS, NULL,
			    "no credentials found: AWS_ACCESS_KEY_ID is not "
			    "set and profile '%s' has none in %s or %s%s",
			    profile, credfile, cfgfile,
			    explicit_profile ? "" : " (set AWS_PROFILE to "
			    "use another profile)");
		return OBJ_ERR_CREDENTIALS;
	}
	return rc;
}
