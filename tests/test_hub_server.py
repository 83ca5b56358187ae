"""The Hub test server against the real ``huggingface_hub`` client, and timm's Hub round trip on it."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from huggingface_hub import (HfApi, ModelCard, ModelCardData, constants, hf_api, hf_hub_download, model_info,
                             snapshot_download)
from huggingface_hub.errors import (EntryNotFoundError, HfHubHTTPError, RemoteEntryNotFoundError,
                                    RepositoryNotFoundError, RevisionNotFoundError)

from hub_server import ORG, OTHER_TOKEN, TOKEN, USER

SHA = re.compile(r"[0-9a-f]{40}")


@pytest.fixture
def api(hub_server):
    return HfApi()


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "upload"
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "config.json").write_text('{"a": 1}')
    (root / "sub" / "weights.bin").write_bytes(bytes(range(256)) * 40)
    (root / "sub" / "deeper" / "notes.txt").write_text("deep")
    return root


def test_client_is_pointed_at_the_server(hub_server, api):
    assert constants.ENDPOINT == hub_server.url == api.endpoint == hf_api.api.endpoint
    assert hub_server.url.startswith("http://127.0.0.1:")
    assert os.environ["HF_ENDPOINT"] == hub_server.url and os.environ["HF_TOKEN"] == TOKEN
    assert constants.HF_HUB_DISABLE_XET and constants.HF_HUB_CACHE.startswith(os.environ["HF_HOME"])


def test_whoami_and_bad_token(hub_server, api):
    me = api.whoami()
    assert me["name"] == USER and [org["name"] for org in me["orgs"]] == [ORG]
    assert HfApi(token=OTHER_TOKEN).whoami()["orgs"] == []
    with pytest.raises(HfHubHTTPError, match="Invalid user token") as info:
        HfApi(token="hf_not_a_token").whoami()
    assert info.value.response.status_code == 401

    api.create_repo("public")
    with pytest.raises(HfHubHTTPError) as info:  # a bad token is rejected, not ignored, on downloads too
        hf_hub_download(f"{USER}/public", ".gitattributes", token="hf_not_a_token")
    assert info.value.response.status_code == 401


def test_create_repo_for_user_and_org(hub_server, api):
    url = api.create_repo("model-a")
    assert url.repo_id == f"{USER}/model-a" and url == f"{hub_server.url}/{USER}/model-a"
    with pytest.raises(HfHubHTTPError) as info:
        api.create_repo("model-a")
    assert info.value.response.status_code == 409
    assert api.create_repo(f"{USER}/model-a", exist_ok=True).repo_id == f"{USER}/model-a"
    assert api.create_repo(f"{ORG}/model-b").repo_id == f"{ORG}/model-b"

    with pytest.raises(HfHubHTTPError) as info:  # no write access to another user's namespace
        HfApi(token=OTHER_TOKEN).create_repo(f"{USER}/model-c")
    assert info.value.response.status_code == 403

    info = api.model_info(f"{USER}/model-a")  # a new repo holds an initial commit, like on the Hub
    assert info.id == f"{USER}/model-a" and SHA.fullmatch(info.sha) and info.private is False
    assert [s.rfilename for s in info.siblings] == [".gitattributes"]


def test_upload_folder_list_and_download(hub_server, api, folder, tmp_path):
    repo = api.create_repo(f"{ORG}/files").repo_id
    commit = api.upload_folder(repo_id=repo, folder_path=folder, commit_message="add files")
    assert SHA.fullmatch(commit.oid) and commit.commit_url.endswith(f"/{repo}/commit/{commit.oid}")
    assert commit.repo_url.repo_id == repo

    expected = [".gitattributes", "config.json", "sub/deeper/notes.txt", "sub/weights.bin"]
    assert sorted(api.list_repo_files(repo)) == expected
    info = model_info(repo, files_metadata=True)  # the module-level client (timm uses it) as well
    assert info.sha == commit.oid
    assert {s.rfilename: s.size for s in info.siblings}["sub/weights.bin"] == 10240
    top = {entry.path: type(entry).__name__ for entry in api.list_repo_tree(repo)}
    assert top == {".gitattributes": "RepoFile", "config.json": "RepoFile", "sub": "RepoFolder"}
    assert sorted(e.path for e in api.list_repo_tree(repo, "sub", recursive=True)) == \
        ["sub/deeper", "sub/deeper/notes.txt", "sub/weights.bin"]

    path = hf_hub_download(repo, "sub/weights.bin")
    assert Path(path).read_bytes() == (folder / "sub" / "weights.bin").read_bytes()
    assert f"snapshots{os.sep}{commit.oid}" in path and path.startswith(os.environ["HF_HUB_CACHE"])
    local = hf_hub_download(repo, "config.json", local_dir=tmp_path / "local")
    assert Path(local).read_text() == '{"a": 1}'

    snapshot = snapshot_download(repo)
    for name in expected[1:]:
        assert Path(snapshot, name).read_bytes() == (folder / name).read_bytes()
    assert not [r for r in hub_server.requests if "lfs" in r or "xet" in r]  # everything went inline


def test_revisions_branches_and_history(hub_server, api):
    repo = api.create_repo("history").repo_id
    first = api.upload_file(path_or_fileobj=b"v1", path_in_repo="value.txt", repo_id=repo)
    second = api.upload_file(path_or_fileobj=b"v2", path_in_repo="value.txt", repo_id=repo)
    assert first.oid != second.oid
    same = api.upload_file(path_or_fileobj=b"v2", path_in_repo="value.txt", repo_id=repo)
    assert same.oid == second.oid  # unchanged content: the client skips the commit (preupload gives the oid)

    read = lambda **kw: Path(hf_hub_download(repo, "value.txt", **kw)).read_bytes()  # noqa: E731
    assert read() == b"v2"
    assert read(revision=first.oid) == b"v1" and read(revision=first.oid[:7]) == b"v1"
    assert api.model_info(repo, revision=first.oid).sha == first.oid

    api.create_branch(repo, branch="dev", revision=first.oid)
    with pytest.raises(HfHubHTTPError) as info:
        api.create_branch(repo, branch="dev")
    assert info.value.response.status_code == 409
    api.create_branch(repo, branch="dev", exist_ok=True)
    on_dev = api.upload_file(path_or_fileobj=b"dev", path_in_repo="dev.txt", repo_id=repo, revision="dev")
    refs = {ref.name: ref.target_commit for ref in api.list_repo_refs(repo).branches}
    assert refs == {"main": second.oid, "dev": on_dev.oid}
    assert read(revision="dev") == b"v1"
    assert sorted(api.list_repo_files(repo, revision="dev")) == [".gitattributes", "dev.txt", "value.txt"]
    assert "dev.txt" not in api.list_repo_files(repo)
    dev_snapshot = snapshot_download(repo, revision="dev")
    assert Path(dev_snapshot, "dev.txt").read_text() == "dev"

    deleted = api.delete_file("value.txt", repo_id=repo)
    assert api.list_repo_files(repo) == [".gitattributes"]
    assert read(revision=second.oid) == b"v2"  # history stays readable
    with pytest.raises(RemoteEntryNotFoundError):
        api.delete_file("value.txt", repo_id=repo)
    with pytest.raises(HfHubHTTPError) as info:  # parent_commit guards against concurrent commits
        api.upload_file(path_or_fileobj=b"x", path_in_repo="x.txt", repo_id=repo, parent_commit=second.oid)
    assert info.value.response.status_code == 412 and api.model_info(repo).sha == deleted.oid
    with pytest.raises(RevisionNotFoundError):  # as on the Hub, commits go to existing branches only
        api.upload_file(path_or_fileobj=b"x", path_in_repo="x.txt", repo_id=repo, revision="no-such-branch")


def test_private_repos(hub_server, api, tmp_path):
    repo = api.create_repo("secret", private=True).repo_id
    api.upload_file(path_or_fileobj=b"hidden", path_in_repo="file.txt", repo_id=repo)
    assert api.model_info(repo).private is True
    assert Path(hf_hub_download(repo, "file.txt")).read_bytes() == b"hidden"

    for token, status in ((False, 401), (OTHER_TOKEN, 404)):  # anonymous / a valid token of another user
        with pytest.raises(RepositoryNotFoundError) as info:
            HfApi(token=token).model_info(repo)
        assert info.value.response.status_code == status
        with pytest.raises(RepositoryNotFoundError):  # (own cache: the client falls back to cached files)
            hf_hub_download(repo, "file.txt", token=token, cache_dir=tmp_path / "other-cache")
        with pytest.raises(RepositoryNotFoundError):
            HfApi(token=token).list_repo_files(repo)

    public = api.create_repo("open").repo_id
    assert HfApi(token=False).model_info(public).id == public
    with pytest.raises(HfHubHTTPError) as info:  # reading is not writing
        HfApi(token=OTHER_TOKEN).upload_file(path_or_fileobj=b"x", path_in_repo="x.txt", repo_id=public)
    assert info.value.response.status_code == 403


def test_not_found_errors(hub_server, api):
    repo = api.create_repo("exists").repo_id
    with pytest.raises(RepositoryNotFoundError):
        api.model_info(f"{USER}/missing")
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download(f"{USER}/missing", "config.json")
    with pytest.raises(RepositoryNotFoundError):
        snapshot_download(f"{ORG}/missing")
    with pytest.raises(EntryNotFoundError) as info:
        hf_hub_download(repo, "config.json")
    assert isinstance(info.value, RemoteEntryNotFoundError)
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download(repo, ".gitattributes", revision="v9")
    with pytest.raises(RevisionNotFoundError):
        api.model_info(repo, revision="0" * 40)
    with pytest.raises(RevisionNotFoundError):
        api.list_repo_files(repo, revision="v9")
    assert api.file_exists(repo, ".gitattributes") and not api.file_exists(repo, "config.json")
    assert not api.repo_exists(f"{USER}/missing")


def test_model_card_push_and_load(hub_server, api):
    repo = api.create_repo("carded").repo_id
    data = ModelCardData(license="apache-2.0", library_name="timm", tags=["image-classification", "mnist"])
    card = ModelCard.from_template(data, model_id="carded", model_description="A minimal vision transformer.")
    card.push_to_hub(repo)

    card = ModelCard.load(repo)
    assert card.data.license == "apache-2.0" and card.data.tags == ["image-classification", "mnist"]
    assert "A minimal vision transformer." in card.text
    info = api.model_info(repo)
    assert info.card_data.license == "apache-2.0" and info.library_name == "timm" and "mnist" in info.tags

    with pytest.raises(ValueError, match="Invalid metadata in README.md"):  # the server validates it
        api.upload_file(path_or_fileobj=b"---\nlicense: [unclosed\n---\n# broken\n", path_in_repo="README.md",
                        repo_id=repo)
    assert ModelCard.load(repo).data.license == "apache-2.0"


def test_subprocess_inherits_the_configuration(hub_server, api):
    api.create_repo("from-child")
    code = ("from huggingface_hub import HfApi, hf_hub_download; api = HfApi(); "
            "print(api.whoami()['name'], api.list_repo_files('testuser/from-child'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == [USER, "['.gitattributes']"]


def test_timm_push_to_hub_and_load_pretrained(hub_server, api):
    torch = pytest.importorskip("torch")
    import timm
    from timm.models import push_to_hf_hub

    import timm_minimal  # noqa: F401  (registers the vit_minimal architectures)

    torch.manual_seed(0)
    model = timm.create_model("vit_minimal_sym_6x4.mnist").eval()
    repo = f"{ORG}/vit-minimal-sym-6x4-mnist"
    push_to_hf_hub(model, repo, safe_serialization=True)
    assert sorted(api.list_repo_files(repo)) == [".gitattributes", "README.md", "config.json", "model.safetensors"]
    assert ModelCard.load(repo).data.library_name == "timm"

    loaded = timm.create_model(f"hf-hub:{repo}", pretrained=True).eval()
    assert type(loaded) is type(model) and loaded.pretrained_cfg["input_size"] == (1, 28, 28)
    x = torch.randn(4, *model.pretrained_cfg["input_size"])
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name
