"""Hidden tests for t4_split_constant: new values, the old name gone, every call site right."""

from pathlib import Path

import taskapp
from taskapp import constants
from taskapp.services import project_service, search_service, task_service
from taskapp.utils.pagination import paginate

PACKAGE = Path(taskapp.__file__).resolve().parent


def test_new_constant_values():
    assert constants.LIST_PAGE_SIZE == 25
    assert constants.SEARCH_PAGE_SIZE == 10


def test_old_name_is_gone_everywhere():
    assert not hasattr(constants, "DEFAULT_PAGE_SIZE")
    leftovers = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if "DEFAULT_PAGE_SIZE" in path.read_text()
    ]
    assert leftovers == []


def test_list_endpoints_use_list_size(app_client):
    tasks = app_client.get("/tasks").json
    assert (tasks["page_size"], len(tasks["items"]), tasks["has_next"]) == (25, 25, True)
    project_tasks = app_client.get("/projects/1/tasks").json
    assert (project_tasks["page_size"], len(project_tasks["items"])) == (25, 25)
    assert app_client.get("/projects").json["page_size"] == 25


def test_search_uses_search_size(app_client):
    found = app_client.get("/search", q="seeded task").json
    assert (found["page_size"], len(found["items"]), found["total"]) == (10, 10, 45)


def test_service_defaults(repo):
    assert task_service.list_tasks(repo).page_size == 25
    assert project_service.list_projects(repo).page_size == 25
    assert project_service.project_tasks(repo, 1).page_size == 25
    assert search_service.search_tasks(repo, "seeded").page_size == 10
    assert paginate(list(range(30))).page_size == 25


def test_explicit_page_size_still_wins(app_client):
    assert len(app_client.get("/search", q="seeded task", page_size=4).json["items"]) == 4
    assert len(app_client.get("/tasks", page_size=7).json["items"]) == 7
