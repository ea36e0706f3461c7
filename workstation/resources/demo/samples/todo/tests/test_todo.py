from todo import TodoList


def make(tmp_path):
    todos = TodoList(tmp_path / "t.json")
    todos.add("first")
    todos.add("second")
    return todos


def test_add_and_list(tmp_path):
    todos = TodoList(tmp_path / "t.json")
    todos.add("write tests")
    assert todos.lines() == ["1. [ ] write tests"]


def test_complete_uses_the_number_shown(tmp_path):
    todos = make(tmp_path)
    todos.complete(1)
    assert todos.lines() == ["1. [x] first", "2. [ ] second"]


def test_remove_uses_the_number_shown(tmp_path):
    todos = make(tmp_path)
    todos.remove(1)
    assert todos.lines() == ["1. [ ] second"]


def test_pending_lists_open_items(tmp_path):
    todos = make(tmp_path)
    todos.items[1]["done"] = True
    assert todos.pending() == ["first"]


def test_saved_to_disk(tmp_path):
    TodoList(tmp_path / "t.json").add("persist me")
    assert TodoList(tmp_path / "t.json").lines() == ["1. [ ] persist me"]
