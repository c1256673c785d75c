from tests.test_fonts_fit import cut_texts, SIZE
from gui import session as sm
from PyQt6.QtWidgets import QApplication

def test_tabs(open_window, qtbot):
    w = open_window(sm.random_session(0, 6, 8, 4, 4, 1), size=SIZE)
    for i in range(w.tabs.count()):
        w.tabs.setCurrentIndex(i)
        for _ in range(20):
            QApplication.processEvents(); qtbot.wait(50)
        print(w.tabs.tabText(i), (w.width(), w.height()), cut_texts(w))
