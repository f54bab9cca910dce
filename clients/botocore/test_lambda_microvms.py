"""boto3, through the botocore model `make gen` writes beside this file,
driving the emulator: every operation of the model, its paginators and its
error cases, with every answer held to the model (a success with the
operation's status, an error the operation lists, at that error's status).

Run by emulator.TestBoto3DrivesTheEmulator, which serves the emulator and
sets MICROVMS_EMULATOR_URL and AWS_DATA_PATH. Standard library and boto3
only (Debian's python3-boto3).
"""

import json
import os
import sys
import unittest

import boto3
import botocore.config
import botocore.exceptions

URL = os.environ.get("MICROVMS_EMULATOR_URL", "")
REGION = "us-east-1"
BASE = "arn:aws:lambda:us-east-1:aws:microvm-image:al2023-1"
ROLE = "arn:aws:iam::123456789012:role/build"
SHELL = "arn:aws:lambda:us-east-1:aws:network-connector:aws-network-connector:SHELL_INGRESS"

# Every answer the emulator gave, as (operation, status, error code or "").
ANSWERS = []
OUTSIDE = []
CALLED = set()


def record(http_response, parsed, model, **_):
    status = http_response.status_code
    code = parsed.get("Error", {}).get("Code", "") if status >= 300 else ""
    ANSWERS.append((model.name, status, code))
    CALLED.add(model.name)
    if status < 300:
        if status != model.http.get("responseCode", 200):
            OUTSIDE.append((model.name, status, "success status not the model's"))
        return
    listed = {e.name: e.metadata.get("error", {}).get("httpStatusCode") for e in model.error_shapes}
    if code not in listed:
        OUTSIDE.append((model.name, status, code + " is not listed"))
    elif listed[code] != status:
        OUTSIDE.append((model.name, status, "%s is listed at %s" % (code, listed[code])))


def client(validate=True):
    """A boto3 client for the emulator; validate=False sends what botocore's
    own checks would stop, to see the emulator refuse it."""
    c = boto3.session.Session().client(
        "lambda-microvms", region_name=REGION, endpoint_url=URL,
        aws_access_key_id="AKIDBOTO3", aws_secret_access_key="boto3-secret",
        config=botocore.config.Config(retries={"max_attempts": 1, "mode": "standard"},
                                      parameter_validation=validate),
    )
    c.meta.events.register("after-call.lambda-microvms", record)
    return c


def create_image(c, name, **extra):
    return c.create_microvm_image(
        name=name, baseImageArn=BASE, buildRoleArn=ROLE,
        codeArtifact={"uri": "s3://not-in-the-emulator/%s.zip" % name},
        hooks={"microvmHooks": {"run": "ENABLED"}}, **extra)


def built(c, name):
    for _ in range(20):
        state = c.get_microvm_image(imageIdentifier=name)["state"]
        if state in ("CREATED", "UPDATED"):
            return
        if state.endswith("FAILED"):
            raise AssertionError("build of %s: %s" % (name, state))
    raise AssertionError("build of %s never finished" % name)


def running(c, vm_id, want="RUNNING"):
    for _ in range(20):
        if c.get_microvm(microvmIdentifier=vm_id)["state"] == want:
            return
    raise AssertionError("%s never reached %s" % (vm_id, want))


class Boto3AgainstTheEmulator(unittest.TestCase):
    maxDiff = None

    def code(self, ctx):
        return ctx.exception.response["Error"]["Code"]

    def test_1_images(self):
        c = client()
        managed = c.list_managed_microvm_images()["items"]
        self.assertEqual([m["imageArn"] for m in managed], [BASE])
        versions = c.list_managed_microvm_image_versions(imageIdentifier=BASE)["items"]
        self.assertTrue(versions)

        out = create_image(c, "boto-img", tags={"team": "a"},
                           cpuConfigurations=[{"architecture": "ARM_64"}])
        self.assertEqual(out["imageVersion"], "1.0")
        # The model's only architecture; X86_64 is refused, not echoed.
        with self.assertRaises(botocore.exceptions.ClientError) as ctx:
            create_image(c, "boto-x86", cpuConfigurations=[{"architecture": "X86_64"}])
        self.assertEqual(self.code(ctx), "ValidationException")
        # Deleting an image while it builds is a conflict.
        with self.assertRaises(c.exceptions.ConflictException):
            c.delete_microvm_image(imageIdentifier="boto-img")
        built(c, "boto-img")
        arn = c.get_microvm_image(imageIdentifier="boto-img")["imageArn"]
        # The slash-form ARN is the measured misleading 403.
        with self.assertRaises(c.exceptions.AccessDeniedException):
            c.get_microvm_image(imageIdentifier=arn.replace(":microvm-image:", ":microvm-image/"))

        create_image(c, "boto-img2")
        built(c, "boto-img2")
        pages = list(c.get_paginator("list_microvm_images").paginate(PaginationConfig={"PageSize": 1}))
        self.assertGreaterEqual(len(pages), 2)
        names = sorted(i["name"] for p in pages for i in p["items"])
        self.assertEqual(names, ["boto-img", "boto-img2"])
        self.assertEqual([i["name"] for i in c.list_microvm_images(nameFilter="img2")["items"]], ["boto-img2"])

        up = c.update_microvm_image(imageIdentifier="boto-img", baseImageArn=BASE, buildRoleArn=ROLE,
                                    codeArtifact={"uri": "s3://not-in-the-emulator/v2.zip"})
        self.assertEqual(up["imageVersion"], "2.0")
        built(c, "boto-img")
        vers = [v["imageVersion"] for p in c.get_paginator("list_microvm_image_versions").paginate(
            imageIdentifier="boto-img", PaginationConfig={"PageSize": 1}) for v in p["items"]]
        self.assertEqual(vers, ["1.0", "2.0"])
        self.assertEqual(c.get_microvm_image_version(imageIdentifier="boto-img", imageVersion="2.0")["state"], "SUCCESSFUL")
        builds = [b for p in c.get_paginator("list_microvm_image_builds").paginate(
            imageIdentifier="boto-img", imageVersion="2.0", architecture="ARM_64",
            PaginationConfig={"PageSize": 1}) for b in p["items"]]
        self.assertEqual(len(builds), 2)
        with self.assertRaises(botocore.exceptions.ClientError) as ctx:
            c.list_microvm_image_builds(imageIdentifier="boto-img", imageVersion="2.0", architecture="X86_64")
        self.assertEqual(self.code(ctx), "ValidationException")
        b = c.get_microvm_image_build(imageIdentifier="boto-img", imageVersion="2.0", buildId=builds[0]["buildId"])
        self.assertEqual(b["buildState"], "SUCCESSFUL")
        with self.assertRaises(c.exceptions.ResourceNotFoundException):
            c.get_microvm_image_build(imageIdentifier="boto-img", imageVersion="2.0", buildId="nope")

        v1 = c.update_microvm_image_version(imageIdentifier="boto-img", imageVersion="1.0", status="INACTIVE")
        self.assertEqual(v1["status"], "INACTIVE")
        c.delete_microvm_image_version(imageIdentifier="boto-img", imageVersion="1.0")
        with self.assertRaises(c.exceptions.ResourceNotFoundException):
            c.get_microvm_image_version(imageIdentifier="boto-img", imageVersion="1.0")

        c.tag_resource(Resource=arn, Tags={"env": "test"})
        self.assertEqual(c.list_tags(Resource=arn)["Tags"], {"team": "a", "env": "test"})
        c.untag_resource(Resource=arn, TagKeys=["team"])
        self.assertEqual(c.list_tags(Resource=arn)["Tags"], {"env": "test"})
        # Tagging speaks Lambda's errors, which it lists.
        with self.assertRaises(c.exceptions.InvalidParameterValueException):
            c.list_tags(Resource="arn:aws:lambda:us-east-1:123456789012:microvm:mvm-1")

        c.delete_microvm_image(imageIdentifier="boto-img2")
        with self.assertRaises(c.exceptions.ResourceNotFoundException):
            c.get_microvm_image(imageIdentifier="boto-img2")

    def test_2_microvms(self):
        c = client()
        create_image(c, "boto-vm")
        built(c, "boto-vm")
        arn = c.get_microvm_image(imageIdentifier="boto-vm")["imageArn"]
        with self.assertRaises(c.exceptions.ResourceNotFoundException):
            c.get_microvm(microvmIdentifier="microvm-nope")
        ids = []
        for _ in range(2):
            ids.append(c.run_microvm(imageIdentifier=arn, runHookPayload='{"agent_token":"t"}',
                                     ingressNetworkConnectors=[SHELL])["microvmId"])
        with self.assertRaises(botocore.exceptions.ClientError) as ctx:
            c.run_microvm(imageIdentifier=arn, maximumDurationInSeconds=28801)
        self.assertEqual(self.code(ctx), "ValidationException")
        vm = ids[0]
        running(c, vm)
        listed = [i["microvmId"] for p in c.get_paginator("list_microvms").paginate(
            imageIdentifier=arn, PaginationConfig={"PageSize": 1}) for i in p["items"]]
        self.assertEqual(listed, ids)

        tok = c.create_microvm_auth_token(microvmIdentifier=vm, expirationInMinutes=5,
                                          allowedPorts=[{"port": 9000}, {"range": {"startPort": 1, "endPort": 2}}])
        self.assertTrue(tok["authToken"])
        with self.assertRaises(botocore.exceptions.ClientError) as ctx:
            client(validate=False).create_microvm_auth_token(
                microvmIdentifier=vm, expirationInMinutes=5, allowedPorts=[{"port": 9000, "allPorts": {}}])
        self.assertEqual(self.code(ctx), "ValidationException")
        self.assertTrue(c.create_microvm_shell_auth_token(microvmIdentifier=vm, expirationInMinutes=5)["authToken"])

        # Idempotent, as the model marks them: twice each.
        c.suspend_microvm(microvmIdentifier=vm)
        c.suspend_microvm(microvmIdentifier=vm)
        running(c, vm, "SUSPENDED")
        c.resume_microvm(microvmIdentifier=vm)
        c.resume_microvm(microvmIdentifier=vm)
        running(c, vm)

        for i in ids:
            c.terminate_microvm(microvmIdentifier=i)
            running(c, i, "TERMINATED")
        with self.assertRaises(c.exceptions.ConflictException):
            c.resume_microvm(microvmIdentifier=vm)
        # Not the unlisted 409: this operation lists no ConflictException.
        with self.assertRaises(c.exceptions.ValidationException):
            c.create_microvm_auth_token(microvmIdentifier=vm, expirationInMinutes=5, allowedPorts=[{"allPorts": {}}])
        c.delete_microvm_image(imageIdentifier=arn)


def summary():
    """Prints the figures the Go test reads; False when any falls short."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lambda-microvms", "2025-09-09", "service-2.json")
    with open(path) as f:
        ops = set(json.load(f)["operations"])
    print("boto3: %d of %d operations called, %d answers, %d outside the model" % (
        len(CALLED & ops), len(ops), len(ANSWERS), len(OUTSIDE)))
    for o in OUTSIDE:
        print("outside the model: %s %s %s" % o)
    missing = sorted(ops - CALLED)
    if missing:
        print("operations never called: %s" % missing)
    return not missing and not OUTSIDE


if __name__ == "__main__":
    if not URL:
        sys.exit("MICROVMS_EMULATOR_URL is not set")
    result = unittest.main(verbosity=2, exit=False).result
    ok = summary()
    sys.exit(0 if ok and result.wasSuccessful() else 1)
