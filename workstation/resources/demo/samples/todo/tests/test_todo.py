from todo import TodoList


def test_add_and_list(tmp_path):
    todos = TodoList(tmp_path / "t.json")
    todos.add("write tests")
    assert todos.lines() == ["1. [ ] write tests"]


def test_complete_uses_the_number_shown(tmp_path):
    todos = TodoList(tmp_path / "t.json")
    todos.add("first")
    todos.add("second")
    todos.complete(1)
    assert todos.lines() == ["1. [x] first", "2. [ ] second"]


def test_saved_to_disk(tmp_path):
    TodoList(tmp_path / "t.json").add("persist me")
    assert TodoList(tmp_path / "t.json").lines() == ["1. [ ] persist me"]
